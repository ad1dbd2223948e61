//! How much GPU memory a trial will peak at, learnt from the trials measured so far.
//!
//! Admission packs a card only as well as this estimate: too high and trials wait for memory
//! they would not use, too low and they run out of it. Peak memory of a neural network grows
//! multiplicatively with its sizes (width × depth × batch) on top of what every trial holds (a
//! CUDA context), so the model is a ridge regression of `ln(peak − base)`, `base` half the
//! smallest peak measured, on the params (numeric ones on a log scale where their range is positive, also on a
//! linear one; categoricals one-hot; a param a trial does not have is a feature of its own): a
//! param that does not drive memory gets a coefficient near 0 and no say (once enough trials are
//! measured, none at all: it is left out when the trials are predicted no worse without it), and
//! a size larger than any seen yet is extrapolated rather than capped at the largest neighbour.
//! Once 3 trials per param are measured, the fit also takes the products of those that drive memory
//! where they predict the trials better (a peak that is a sum of products curves in log sizes),
//! and then leaves out again, with its products, a param it kept only for the curvature the
//! linear fit could not follow.
//!
//! With caps off ([`Aim::Bound`]) the estimate admission uses is an upper bound: the prediction
//! raised by a margin calibrated from the model's own errors (each recently measured trial
//! predicted by the current model without that trial, leave-one-out, against its peak; scaled by
//! how far the trial lies from the others), wide while few are known and narrowing as they come,
//! and at least as wide as what the measured trials never varied leaves unknown (a deep trial after
//! shallow ones), wider still for a peak predicted beyond every measured one; measured trials whose
//! memory-relevant params are (almost) the same as the new one's raise it to their peak, and so
//! does a measured trial no larger in any size that drives memory (memory rarely shrinks as a size
//! grows: this holds where the fit extrapolates badly, as for a categorical batch size never
//! measured yet); and an out-of-memory failure raises it near the failed params only, "near"
//! measured in what the params do to memory (a param of no effect does not make two trials far
//! apart).
//!
//! Under caps, once the study's workers are known to enforce them ([`Aim::Peak`]: a worker
//! reported its framework), a trial that outgrows its estimate fails alone at its cap and is
//! re-run, so the estimate aims at the peak instead: the prediction plus the [`BOLD_QUANTILE`]
//! of the same errors, with none of the widening for what is unknown; a study's first trials
//! start at a small prior; every raise by facts (the smallest peak, the same config, a measured
//! trial no larger in any size, out-of-memory and cap floors) stays, and a re-run after a cap
//! hit is expected at [`CAP_GROWTH`] times what its attempt was admitted with at least.
//!
//! Pure: no I/O, no clock. `docs/gpu-memory-model.md` explains it to users.

use crate::study::{Distribution, ParamValue, Params, SearchSpace};
use crate::units::format_gib;
use fit::{own_effect, pair_drivers, ridge, select, Features, Fit, Measured, Normal};
use std::collections::VecDeque;
use std::ops::Range;

mod fit;
mod tuning;

pub use tuning::*;

/// How a param becomes features.
#[derive(Debug, Clone)]
enum Encoding {
    /// Linear position in [0, 1], and the log position where the range is positive.
    Numeric {
        low: f64,
        high: f64,
        log: bool,
    },
    Categorical {
        choices: usize,
    },
}

impl Encoding {
    /// Features: numeric `[linear, log]` (or `[linear]`), categorical one-hot; then a last one
    /// that is 1 when the trial does not have the param (a conditional space's other branch).
    fn width(&self) -> usize {
        1 + match self {
            Encoding::Numeric { log: true, .. } => 2,
            Encoding::Numeric { log: false, .. } => 1,
            Encoding::Categorical { choices } => *choices,
        }
    }

    fn encode(&self, dist: &Distribution, v: Option<&ParamValue>, out: &mut Features) {
        let start = out.len();
        out.resize(start + self.width(), 0.0);
        let Some(v) = v else {
            out[start + self.width() - 1] = 1.0;
            return;
        };
        match (self, v) {
            (Encoding::Categorical { choices }, ParamValue::Choice(i)) if i < choices => {
                out[start + i] = 1.0
            }
            (Encoding::Numeric { low, high, log }, v) => {
                let x = dist.to_internal(v);
                let span = high - low;
                out[start] = if span > 0.0 { (x - low) / span } else { 0.0 };
                if *log {
                    let (l, h) = (low.ln(), high.ln());
                    out[start + 1] = if h > l && x > 0.0 {
                        (x.ln() - l) / (h - l)
                    } else {
                        0.0
                    };
                }
            }
            _ => out[start + self.width() - 1] = 1.0,
        }
    }
}

#[derive(Debug, Clone)]
struct OomFloor {
    x: Features,
    reached: u64,
    floor: u64,
    /// From a cap hit ([`MemoryModel::record_cap`]), not a device's out-of-memory failure.
    cap: bool,
}

/// What an estimate aims at: the bound, until the study's workers are known to enforce their
/// caps (`supervisor::decide::aim`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Aim {
    /// Caps off, or no worker of the study has reported a framework that enforces its cap yet:
    /// an upper bound. A trial that outgrows its estimate takes memory its neighbours were
    /// admitted with, and one of them may die of it.
    #[default]
    Bound,
    /// Caps on, and the study's workers enforce them: the peak. A trial that outgrows its
    /// estimate fails alone at its cap and is re-run larger, which costs it the seconds until
    /// the hit, and its neighbours nothing.
    Peak,
}

/// The memory model (see the module documentation).
#[derive(Debug, Clone)]
pub struct MemoryModel {
    aim: Aim,
    names: Vec<String>,
    dists: Vec<Distribution>,
    encodings: Vec<Encoding>,
    prior: u64,
    measured: VecDeque<Measured>,
    floors: VecDeque<OomFloor>,

    fit: Option<Fit>,
    /// Trials recorded so far (ended and measured), and the last choice of the fit's columns.
    recorded: usize,
    selection: Option<Selection>,
}

/// The fit's columns as last chosen ([`MemoryModel::refit`]).
#[derive(Debug, Clone)]
struct Selection {
    /// Trials recorded when they were chosen.
    at: usize,
    /// The columns kept ([`select`]) and the pairs of them in the fit ([`pair_drivers`]).
    keep: Vec<bool>,
    pairs: Vec<(usize, usize)>,
}

/// An estimate, with the words that explain it.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The upper bound admission uses.
    pub bytes: u64,
    /// The model's prediction before the margin (0 while there is none).
    pub predicted: u64,
    pub why: String,
}

impl Estimate {
    /// `why` headed by the figure it ends at, once every raise is made: the steps write how
    /// they came to it, and a raise appends ("…, raised to 1.9 GiB by its memory cap
    /// reached"). Each step once wrote its own figure as the head, and the head then named the
    /// figure before the raises ("admitted: expected peak 1.8 GiB: …, raised to 1.9 GiB …" for
    /// a trial admitted with 1.9 GiB).
    fn headed(mut self) -> Estimate {
        if self.bytes > 0 {
            self.why = format!("{}: {}", format_gib(self.bytes), self.why);
        }
        self
    }
}

/// Where a trial lies along one param ([`MemoryModel::position`]): a number (a numeric param's
/// position in its range, or a categorical's choice where every choice is a number), a choice
/// with no order, or the param absent from the trial.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Position {
    At(f64),
    Choice(usize),
    Absent,
}

/// What is known of a trial's memory before any fit: the user's guess (`trial_memory`), or the
/// largest peak measured if larger.
struct Guess {
    bytes: u64,
    /// Which of the two, in words.
    what: &'static str,
    /// `bytes` with the prior's margin.
    margined: u64,
}

impl Guess {
    fn new(prior: u64, largest: u64) -> Guess {
        let (bytes, what) = if largest > prior {
            (largest, "the largest peak measured")
        } else {
            (prior, "trial_memory")
        };
        Guess {
            bytes,
            what,
            margined: with_prior_margin(bytes),
        }
    }

    /// A value no measured trial had (`novel`: the params that take one): the fit knows
    /// nothing of what it does to memory, so the estimate is no lower than this guess.
    fn raise_for_novel(&self, novel: &[&str], estimate: &mut Estimate) {
        if self.margined > estimate.bytes {
            estimate.bytes = self.margined;
            estimate.why.push_str(&format!(
                ", raised to {} ({} {} x {PRIOR_MARGIN}): no trial measured yet with this {} value",
                format_gib(self.margined),
                self.what,
                format_gib(self.bytes),
                novel.join(", ")
            ));
        }
    }
}

impl MemoryModel {
    /// `prior` is `[gpu] trial_memory`, the guess until [`MIN_MEASURED`] trials are measured
    /// (0: no guess; then only `max_par_per_device` limits the first trials).
    pub fn new(space: &SearchSpace, prior: u64) -> MemoryModel {
        let mut m = MemoryModel {
            aim: Aim::Bound,
            names: Vec::new(),
            dists: Vec::new(),
            encodings: Vec::new(),
            prior,
            measured: VecDeque::new(),
            floors: VecDeque::new(),
            fit: None,
            recorded: 0,
            selection: None,
        };
        for p in &space.params {
            m.learn_param(&p.name, &p.dist);
        }
        m
    }

    /// The model with estimates that aim at `aim` (a new model's is [`Aim::Bound`]).
    pub fn aiming(mut self, aim: Aim) -> MemoryModel {
        self.aim = aim;
        self
    }

    /// What its estimates aim at now; [`MemoryModel::set_aim`] changes it.
    pub fn aim(&self) -> Aim {
        self.aim
    }

    pub fn set_aim(&mut self, aim: Aim) {
        self.aim = aim;
    }

    /// What a trial is expected at on `trial_memory` alone, before anything measured says
    /// better: the guess with [`PRIOR_MARGIN`] (0 without a guess).
    pub fn guess(&self) -> u64 {
        with_prior_margin(self.prior)
    }

    /// A param the model had not seen (a define-by-run space discovers them as trials run):
    /// earlier trials did not have it. Returns its index.
    fn learn_param(&mut self, name: &str, dist: &Distribution) -> usize {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return i;
        }
        let enc = match dist {
            Distribution::Categorical { choices } => Encoding::Categorical {
                choices: choices.len(),
            },
            Distribution::Float { low, high, .. } => Encoding::Numeric {
                low: *low,
                high: *high,
                log: *low > 0.0,
            },
            Distribution::Int { low, high, .. } => Encoding::Numeric {
                low: *low as f64,
                high: *high as f64,
                log: *low > 0,
            },
        };
        let width = enc.width();
        self.names.push(name.to_owned());
        self.dists.push(dist.clone());
        self.encodings.push(enc);
        // Earlier trials lacked it: their "missing" feature is 1.
        for m in &mut self.measured {
            m.x.extend(std::iter::repeat_n(0.0, width - 1));
            m.x.push(1.0);
        }
        for f in &mut self.floors {
            f.x.extend(std::iter::repeat_n(0.0, width - 1));
            f.x.push(1.0);
        }
        self.fit = None;
        self.names.len() - 1
    }

    fn features(&self, params: &Params) -> Features {
        let mut x = Vec::new();
        for ((name, dist), enc) in self.names.iter().zip(&self.dists).zip(&self.encodings) {
            enc.encode(dist, params.get(name), &mut x);
        }
        x
    }

    /// A finished trial's measured peak (bytes). A peak of 0 (never allocated, no reading) is
    /// ignored.
    pub fn record(&mut self, params: &Params, peak: u64) {
        if peak == 0 {
            return;
        }
        let x = self.features(params);
        if self.aim == Aim::Peak {
            // Its peak is measured now: the floors its failed attempts left (a guess of where
            // that peak lies, up to `CAP_GROWTH` times too high) give way to the fact.
            self.floors.retain(|f| f.x != x);
        }
        self.measured.push_back(Measured {
            x,
            peak,
            running: None,
        });
        self.recorded += 1;
        if self.measured.len() > MAX_SAMPLES {
            self.measured.pop_front();
        }
        self.fit = None;
    }

    /// The running trials that have settled at their peak (`gpu::monitor::settled`), each with
    /// the level it holds, replacing those given before: each counts as measured at that level
    /// until it ends ([`MemoryModel::ended`]).
    ///
    /// A trial reaches its peak within seconds of starting and ends minutes (or hours) later:
    /// waiting for trials to end before learning from them kept the bounds of the first dozens
    /// of trials wide for as long as the first ones ran. A level may be below the peak the trial
    /// ends with (an evaluation pass late in the run); the monitor stops settling trials once
    /// one of the study has grown after settling, and then none is given here.
    pub fn running<'a>(&mut self, levels: impl IntoIterator<Item = (i64, &'a Params, u64)>) {
        let levels: Vec<(i64, &Params, u64)> =
            levels.into_iter().filter(|(_, _, l)| *l > 0).collect();
        let before = self.measured.len();
        self.measured.retain(|m| {
            m.running
                .is_none_or(|id| levels.iter().any(|(i, _, _)| *i == id))
        });
        let mut changed = self.measured.len() != before;
        for (id, params, level) in levels {
            match self.measured.iter_mut().find(|m| m.running == Some(id)) {
                Some(m) if m.peak >= level => {}
                Some(m) => {
                    m.peak = level;
                    changed = true;
                }
                None => {
                    let x = self.features(params);
                    self.measured.push_back(Measured {
                        x,
                        peak: level,
                        running: Some(id),
                    });
                    changed = true;
                }
            }
        }
        if changed {
            self.fit = None;
        }
    }

    /// A running trial ended: its settled level no longer counts (its measured peak, if any, is
    /// recorded with [`MemoryModel::record`]).
    pub fn ended(&mut self, trial_id: i64) {
        let before = self.measured.len();
        self.measured.retain(|m| m.running != Some(trial_id));
        if self.measured.len() != before {
            self.fit = None;
        }
    }

    /// Tells the model about a param of a define-by-run space before a trial with it is
    /// recorded (a TOML space's params are known from the start).
    pub fn param(&mut self, name: &str, dist: &Distribution) {
        self.learn_param(name, dist);
    }

    /// A trial with these params ran out of memory having reached `reached` bytes: estimates
    /// near them (in what the params do to memory) are at least `reached × OOM_GROWTH`, capped
    /// at `device_total` (0: unknown).
    pub fn record_oom(&mut self, params: &Params, reached: u64, device_total: u64) {
        let floor = (reached as f64 * OOM_GROWTH).ceil() as u64;
        self.floor(params, reached, floor, device_total, false);
    }

    /// Estimates near `params` are at least `floor` (capped at `device_total`, 0: unknown),
    /// learnt from a failure that reached `reached` bytes.
    fn floor(&mut self, params: &Params, reached: u64, floor: u64, device_total: u64, cap: bool) {
        let floor = match device_total {
            0 => floor,
            total => floor.min(total),
        };
        if floor == 0 {
            return;
        }
        let x = self.features(params);
        self.floors.push_back(OomFloor {
            x,
            reached,
            floor,
            cap,
        });
        if self.floors.len() > MAX_SAMPLES {
            self.floors.pop_front();
        }
    }

    /// A trial with these params reached its memory cap, having needed at least `level` bytes
    /// with its worker's context, under a cap from the `admitted` bytes: its re-run, and
    /// estimates near it, are at least [`cap_floor`] of them, capped at `device_total` (0:
    /// unknown).
    pub fn record_cap(&mut self, params: &Params, level: u64, admitted: u64, device_total: u64) {
        self.floor(
            params,
            level,
            cap_floor(level, admitted),
            device_total,
            true,
        );
    }

    /// Measured peaks held.
    pub fn measured(&self) -> usize {
        self.measured.len()
    }

    /// The upper bound for a trial with these params (what admission uses).
    pub fn expected(&mut self, params: &Params) -> u64 {
        self.estimate(params).bytes
    }

    /// The estimate with its explanation, e.g. "5.2 GiB: 4.6 GiB fitted on 23 trials (width,
    /// depth drive memory; lr does not) + 13% margin (p97 of its errors on the last 23 trials
    /// left out, wider while they are few)".
    pub fn estimate(&mut self, params: &Params) -> Estimate {
        self.refit();
        self.bound(&self.features(params))
    }

    /// The estimate for a trial of features `own` (before the fit's pairs): the fit's (or,
    /// before one, the guess), raised where what was measured says it must be.
    fn bound(&self, own: &[f64]) -> Estimate {
        let fit = self.fit.as_ref();
        let expanded = fit.map(|fit| fit.expand(own));
        let x = expanded.as_deref().unwrap_or(own);
        let largest = self.measured.iter().map(|m| m.peak).max().unwrap_or(0);
        let guess = Guess::new(self.prior, largest);
        let bold = self.aim == Aim::Peak;
        let mut estimate = match fit {
            None if bold => self.small_prior(largest),
            None => self.unfitted(&guess),
            Some(fit) => self.fitted(fit, x, largest),
        };
        let novel = fit.map(|fit| self.novel(fit, x)).unwrap_or_default();
        if let Some(fit) = fit {
            self.raise_to_smallest(&mut estimate);
            if novel.is_empty() {
                self.raise_to_same_config(fit, x, &mut estimate);
            }
        }
        // Under caps a value never measured is a guess like any other: its cap says.
        if !novel.is_empty() && !bold {
            guess.raise_for_novel(&novel, &mut estimate);
        }
        if let Some(fit) = fit {
            self.raise_to_smaller_measured(fit, own, &mut estimate);
        }
        self.raise_to_oom_floor(fit, own, x, &mut estimate);
        estimate.headed()
    }

    /// "2 of 3 trials measured": how far a study is from its first fit.
    fn progress(&self) -> String {
        format!("{} of {MIN_MEASURED} trials measured", self.measured.len())
    }

    /// ", 2 of them running at their level": the measured trials that are settled running
    /// ones (none: nothing).
    fn running_words(&self) -> String {
        match self.measured.iter().filter(|m| m.running.is_some()).count() {
            0 => String::new(),
            k => format!(", {k} of them running at their level"),
        }
    }

    /// Before any fit: the guess with its margin.
    fn unfitted(&self, guess: &Guess) -> Estimate {
        let progress = self.progress();
        let (bytes, why) = if guess.bytes == 0 {
            (0, no_estimate(&progress))
        } else {
            let why = format!(
                "{} ({}) x {PRIOR_MARGIN}, {progress}",
                guess.what,
                format_gib(guess.bytes)
            );
            (guess.margined, why)
        };
        Estimate {
            bytes,
            predicted: 0,
            why,
        }
    }

    /// Under caps, before any fit: the largest peak measured (of at most two: no trial is
    /// expected below one no larger in any size), or with none [`BOLD_PRIOR_SHARE`] of
    /// `trial_memory`, without a margin. A trial that needs more hits its cap within seconds
    /// and is re-run larger ([`cap_floor`]); one admitted at a bound would hold memory it never
    /// uses for its whole run.
    fn small_prior(&self, largest: u64) -> Estimate {
        let progress = self.progress();
        let (bytes, why) = if largest > 0 {
            let why =
                format!("the largest peak measured, {progress} (under caps: aimed at the peak)");
            (largest, why)
        } else if self.prior == 0 {
            (0, no_estimate(&progress))
        } else {
            let b = (self.prior as f64 * BOLD_PRIOR_SHARE).ceil() as u64;
            let why = format!(
                "trial_memory ({}) x {BOLD_PRIOR_SHARE}, {progress} (under caps: a trial that \
                 needs more is re-run larger)",
                format_gib(self.prior)
            );
            (b, why)
        };
        Estimate {
            bytes,
            predicted: 0,
            why,
        }
    }

    /// The fit's prediction for features `x` plus its margin (`largest`: the largest peak
    /// measured).
    fn fitted(&self, fit: &Fit, x: &[f64], largest: u64) -> Estimate {
        if self.aim == Aim::Peak {
            return self.aimed(fit, x);
        }
        let n = self.measured.len();
        let log_pred = fit.predict(x);
        // Where the model erred more than usual (a region it fits badly), its errors
        // there widen the margin there.
        let local = self.local_error(fit, x);
        let calibrated = margin(fit, fit.nearest(x)).max(local + MIN_MARGIN);
        // Its errors cannot speak for what the measured trials never varied.
        let unknown = UNEXPLORED * fit.unexplored_own(x).sqrt() / n as f64;
        let bytes = |log: f64| (fit.base + log.exp()).min(u64::MAX as f64);
        let predicted = bytes(log_pred) as u64;
        // Nor, where the fit is linear, for a peak beyond every measured one.
        let beyond = if fit.pairs.is_empty() {
            (predicted as f64 / largest.max(1) as f64).ln().max(0.0)
        } else {
            0.0
        };
        let margin = calibrated.max(unknown) + BEYOND * beyond;
        let b = bytes(log_pred + margin).ceil() as u64;
        let margin = (b as f64 / predicted.max(1) as f64).ln();
        let mut words = if unknown > calibrated {
            "wide where these params lie beyond what the measured trials varied".to_owned()
        } else {
            margin_words(fit)
        };
        if beyond > 0.0 {
            words.push_str(&format!(
                "; wider beyond the largest peak measured, {}",
                format_gib(largest)
            ));
        }
        let why = format!(
            "{} fitted on {n} trials{} ({}) + {:.0}% margin ({words})",
            format_gib(predicted),
            self.running_words(),
            self.drivers(fit),
            (margin.exp() - 1.0) * 100.0,
        );
        Estimate {
            bytes: b,
            predicted,
            why,
        }
    }

    /// Under caps: the fit's prediction for features `x` plus the [`BOLD_QUANTILE`] of its
    /// distance-scaled errors, at least [`MIN_MARGIN`]; nothing for what the measured trials
    /// never varied nor for a peak beyond theirs, nor the local errors: a trial that outgrows
    /// it fails at its cap alone and is re-run.
    fn aimed(&self, fit: &Fit, x: &[f64]) -> Estimate {
        let n = self.measured.len();
        let log_pred = fit.predict(x);
        let bytes = |log: f64| (fit.base + log.exp()).min(u64::MAX as f64);
        let predicted = bytes(log_pred) as u64;
        let margin = bold_margin(fit, fit.nearest(x));
        let b = bytes(log_pred + margin).ceil() as u64;
        let shown = (b as f64 / predicted.max(1) as f64).ln();
        let why = format!(
            "{} fitted on {n} trials{} ({}) + {:.0}% margin (p{:.0} of its errors on the last {} \
             trials left out: under caps, aimed at the peak)",
            format_gib(predicted),
            self.running_words(),
            self.drivers(fit),
            (shown.exp() - 1.0) * 100.0,
            BOLD_QUANTILE * 100.0,
            fit.scores.len(),
        );
        Estimate {
            bytes: b,
            predicted,
            why,
        }
    }

    /// Every trial holds at least what the smallest measured one did (its process's CUDA
    /// context, the framework's own buffers): a fit does not go below that.
    fn raise_to_smallest(&self, estimate: &mut Estimate) {
        let smallest = self.measured.iter().map(|m| m.peak).min().unwrap_or(0);
        if smallest > estimate.bytes {
            estimate.bytes = smallest;
            estimate.why.push_str(&format!(
                ", raised to the smallest peak measured ({})",
                format_gib(smallest)
            ));
        }
    }

    /// The same config measured before: its peaks are facts, not a fit. Measured often
    /// enough, they are the bound; once or twice, they raise it. Not where a param takes a
    /// value never measured (the caller's to check): the fit cannot tell it apart from the rest.
    fn raise_to_same_config(&self, fit: &Fit, x: &[f64], estimate: &mut Estimate) {
        // The fit's trials are the measured ones, in order (`Fit::distance_to`).
        let cx = fit.compact(x);
        let same: Vec<u64> = self
            .measured
            .iter()
            .enumerate()
            .filter(|(i, _)| fit.distance_to(*i, &cx) < SAME_CONFIG)
            .map(|(_, m)| m.peak)
            .collect();
        if let Some(&peak) = same.iter().max() {
            let b = (peak as f64 * (1.0 + MIN_MARGIN)).ceil() as u64;
            if same.len() >= SAME_CONFIG_TRUSTED || b > estimate.bytes {
                estimate.bytes = b;
                estimate.why = format!(
                    "the largest peak of {} measured trials of the same config ({}) + {:.0}%",
                    same.len(),
                    format_gib(peak),
                    MIN_MARGIN * 100.0
                );
            }
        }
    }

    /// Memory rarely shrinks as a size grows: a trial no smaller than a measured one in every
    /// size that drives memory (integers compared in the direction the fit gives them, a
    /// categorical of numbers as a size, other choices equal; floats and params of no effect
    /// ignored)
    /// peaks at least where that one did. The fit cannot say so for a size beyond the measured
    /// ones (a batch of 128 after 16 to 64: its one-hot column was never set), nor where its
    /// margin is thin; the measured peak is a fact.
    fn raise_to_smaller_measured(&self, fit: &Fit, own: &[f64], estimate: &mut Estimate) {
        let columns = self.columns();
        let sizes: Vec<(usize, f64, Position)> = self
            .sizes(fit)
            .into_iter()
            .map(|(p, direction)| (p, direction, self.position(p, &columns[p], own)))
            .collect();
        let floor = self
            .measured
            .iter()
            .filter(|m| {
                sizes.iter().all(|&(p, direction, new)| {
                    match (new, self.position(p, &columns[p], &m.x)) {
                        (Position::At(a), Position::At(b)) => (a - b) * direction >= -1e-12,
                        (new, old) => new == old,
                    }
                })
            })
            .map(|m| m.peak)
            .max();
        if let Some(peak) = floor {
            let b = (peak as f64 * (1.0 + MIN_MARGIN)).ceil() as u64;
            if b > estimate.bytes {
                estimate.bytes = b;
                estimate.why.push_str(&format!(
                    ", raised to {} by a measured trial no larger in any size ({} + {:.0}%)",
                    format_gib(b),
                    format_gib(peak),
                    MIN_MARGIN * 100.0
                ));
            }
        }
    }

    /// The sizes: the integer and categorical params that drive memory in `fit`, each with the
    /// direction sizes grow in: +1 where
    /// memory grows with the param, −1 where the fit says it shrinks (a numeric param whose own
    /// coefficients sum below 0). A categorical's choices are sizes in the order of their numbers.
    fn sizes(&self, fit: &Fit) -> Vec<(usize, f64)> {
        let mut out = Vec::new();
        for (p, cols) in self.columns().into_iter().enumerate() {
            // A float (a learning rate, a dropout) is not a size: a fit that gives one a
            // little weight from the noise would keep the rule from ever applying.
            if matches!(self.dists[p], Distribution::Float { .. }) || effect(fit, &cols) < DRIVES {
                continue;
            }
            let direction = match self.encodings[p] {
                Encoding::Numeric { .. } => {
                    let own: f64 = fit.beta[cols.start..cols.end - 1].iter().sum();
                    if own < 0.0 {
                        -1.0
                    } else {
                        1.0
                    }
                }
                Encoding::Categorical { .. } => 1.0,
            };
            out.push((p, direction));
        }
        out
    }

    /// Where features `x` lie along param `p` (`cols`: its columns), for comparing sizes.
    fn position(&self, p: usize, cols: &Range<usize>, x: &[f64]) -> Position {
        if x[cols.end - 1] == 1.0 {
            return Position::Absent;
        }
        match (&self.encodings[p], &self.dists[p]) {
            (Encoding::Numeric { .. }, _) => Position::At(x[cols.start]),
            (Encoding::Categorical { choices }, Distribution::Categorical { choices: values }) => {
                let Some(i) = (0..*choices).find(|i| x[cols.start + i] == 1.0) else {
                    return Position::Absent;
                };
                match values.get(i) {
                    Some(serde_json::Value::Number(n)) if values.iter().all(|v| v.is_number()) => {
                        Position::At(n.as_f64().unwrap_or(f64::NAN))
                    }
                    _ => Position::Choice(i),
                }
            }
            (Encoding::Categorical { .. }, _) => Position::Absent,
        }
    }

    /// The highest out-of-memory floor near these params (`own`, `x` as the fit sees them):
    /// the estimate is no lower.
    fn raise_to_oom_floor(
        &self,
        fit: Option<&Fit>,
        own: &[f64],
        x: &[f64],
        estimate: &mut Estimate,
    ) {
        let floor = self
            .floors
            .iter()
            .filter(|f| match fit {
                Some(fit) => fit.distance(&fit.expand(&f.x), x) <= OOM_RADIUS,
                None => f.x == own,
            })
            .max_by_key(|f| f.floor);
        if let Some(f) = floor {
            if f.floor > estimate.bytes {
                estimate.bytes = f.floor;
                let what = if f.cap {
                    "its memory cap reached"
                } else {
                    "an out-of-memory failure"
                };
                estimate.why.push_str(&format!(
                    ", raised to {} by {what} at {} with these params' memory",
                    format_gib(f.floor),
                    format_gib(f.reached)
                ));
            }
        }
    }

    /// The params of `x` that take a value no measured trial had (a categorical choice never
    /// measured, a param measured trials did not have, a number where every measured trial had
    /// the same): the fit gives them no weight for want of data, not for want of effect.
    fn novel(&self, fit: &Fit, x: &[f64]) -> Vec<&str> {
        let mut out = Vec::new();
        for (name, cols) in self.names.iter().zip(self.columns()) {
            let unseen = cols.into_iter().any(|j| {
                fit.keep[j] && fit.hi[j] - fit.lo[j] < 1e-9 && (x[j] - fit.lo[j]).abs() > 1e-9
            });
            if unseen {
                out.push(name.as_str());
            }
        }
        out
    }

    /// The largest leave-one-out error of the current model on the recently measured trials
    /// nearest these features: a region it fits badly keeps a wide margin there.
    fn local_error(&self, fit: &Fit, x: &[f64]) -> f64 {
        let k = 2 * NEIGHBOURS;
        let mut near: Vec<(f64, f64)> = Vec::with_capacity(k + 1);
        let cx = fit.compact(x);
        for (i, e, _) in &fit.loo {
            let d = fit.distance_to(*i, &cx);
            if near.len() < k || d < near[near.len() - 1].0 {
                let pos = near.partition_point(|(f, _)| *f <= d);
                near.insert(pos, (d, *e));
                near.truncate(k);
            }
        }
        near.iter().map(|(_, e)| *e).fold(0.0, f64::max)
    }

    /// Which params drive memory and which do not, by the size of their coefficients.
    fn drivers(&self, fit: &Fit) -> String {
        let mut drive = Vec::new();
        let mut idle = Vec::new();
        for (name, cols) in self.names.iter().zip(self.columns()) {
            let effect = effect(fit, &cols);
            if effect >= DRIVES {
                drive.push((effect, name.as_str()));
            } else {
                idle.push(name.as_str());
            }
        }
        drive.sort_by(|a, b| b.0.total_cmp(&a.0));
        let drive: Vec<&str> = drive.iter().map(|d| d.1).collect();
        let products = if fit.pairs.is_empty() {
            ""
        } else {
            ", with products of them"
        };
        match (drive.is_empty(), idle.is_empty()) {
            (true, _) => "no param drives memory".into(),
            (false, true) => format!("{} drive memory{products}", drive.join(", ")),
            (false, false) => format!(
                "{} drive memory{products}; {} {} not",
                drive.join(", "),
                idle.join(", "),
                if idle.len() == 1 { "does" } else { "do" }
            ),
        }
    }

    /// Each param's feature columns, in the order of `names`.
    fn columns(&self) -> Vec<Range<usize>> {
        let mut col = 0;
        self.encodings
            .iter()
            .map(|enc| {
                col += enc.width();
                col - enc.width()..col
            })
            .collect()
    }

    /// Fits the regression on the measured trials, unless it is fitted already (until the next
    /// record) or too few are measured.
    fn refit(&mut self) {
        if self.fit.is_some() || self.measured.len() < MIN_MEASURED {
            return;
        }
        let groups = self.columns();
        let width = groups.last().map_or(0, |g| g.end);
        // Which params earn their place, and which pairs, changes slowly as trials come, and
        // choosing them costs a fit per param and round (0.2 s with 30 params and 2000 trials,
        // `make bench`'s model section): they are chosen again once a tenth more trials are
        // recorded, not at every record or settled level; in between, a fit reads only their
        // columns (`Normal::on`).
        let (normal, keep, pairs) = match &self.selection {
            Some(Selection { at, keep, pairs })
                if keep.len() == width + pairs.len() && self.recorded < at + (at / 10).max(1) =>
            {
                (
                    Normal::on(&self.measured, pairs, Some(keep)),
                    keep.clone(),
                    pairs.clone(),
                )
            }
            _ => {
                let normal = Normal::new(&self.measured, &[]);
                let keep = select(&normal, &groups);
                let (normal, keep, pairs) =
                    pair_drivers(&self.measured, normal, &groups, &self.picks(), keep);
                self.selection = Some(Selection {
                    at: self.recorded,
                    keep: keep.clone(),
                    pairs: pairs.clone(),
                });
                (normal, keep, pairs)
            }
        };
        self.fit = Some(ridge(&self.measured, &normal, keep, pairs));
    }

    /// The feature of each param that pairs with others ([`pair_drivers`]), as (column, param):
    /// a numeric param's log position where it has one (else its linear one), each of a
    /// categorical's choices.
    fn picks(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for (p, (enc, cols)) in self.encodings.iter().zip(self.columns()).enumerate() {
            match enc {
                Encoding::Numeric { log: true, .. } => out.push((cols.start + 1, p)),
                Encoding::Numeric { log: false, .. } => out.push((cols.start, p)),
                Encoding::Categorical { choices } => {
                    out.extend((cols.start..cols.start + choices).map(|j| (j, p)))
                }
            }
        }
        out
    }
}

/// A param's effect on log-peak in `fit` (`cols`: its columns): the largest change across its
/// own range (its last column says only whether a trial has it), and at most what its pairs
/// add to it (every feature that pairs lies in [0, 1]).
fn effect(fit: &Fit, cols: &Range<usize>) -> f64 {
    let base = fit.beta.len() - fit.pairs.len();
    let paired: f64 = fit
        .pairs
        .iter()
        .enumerate()
        .filter(|(_, (a, b))| cols.contains(a) || cols.contains(b))
        .map(|(k, _)| fit.beta[base + k].abs())
        .sum();
    own_effect(&fit.beta, cols) + paired
}

/// What a re-run after a cap hit is expected at least: its `level` (what it needed at least)
/// × [`OOM_GROWTH`], and [`CAP_GROWTH`] × the bytes its attempt was `admitted` with, so that a
/// trial that allocates in small steps from a small prior reaches its peak in a few re-runs,
/// not in one per step.
pub fn cap_floor(level: u64, admitted: u64) -> u64 {
    let learnt = level as f64 * OOM_GROWTH;
    let grown = admitted as f64 * CAP_GROWTH;
    learnt.max(grown).min(u64::MAX as f64).ceil() as u64
}

/// Why there is no estimate: nothing to start from (`progress`: [`MemoryModel::progress`]).
fn no_estimate(progress: &str) -> String {
    format!("no estimate yet: trial_memory unset, {progress}")
}

/// `bytes` with [`PRIOR_MARGIN`], rounded up.
fn with_prior_margin(bytes: u64) -> u64 {
    (bytes as f64 * PRIOR_MARGIN).ceil() as u64
}

/// The log-margin for a trial `distance` away from the nearest measured one: the
/// [`QUANTILE`] of the fit's leave-one-out errors (each scaled to that distance), widened while
/// they are few; with none, the prior margin.
fn margin(fit: &Fit, distance: f64) -> f64 {
    let n = fit.scores.len();
    if n == 0 {
        return PRIOR_MARGIN.ln() + EARLY;
    }
    let k = ((n as f64 * QUANTILE).ceil() as usize).clamp(1, n) - 1;
    (fit.scores[k] * (SPREAD + distance) + EARLY / (n as f64).sqrt()).max(MIN_MARGIN)
}

/// Under caps, the log-margin for a trial `distance` away from the nearest measured one: the
/// [`BOLD_QUANTILE`] of the fit's leave-one-out errors scaled to that distance, at least
/// [`MIN_MARGIN`] (with no errors yet, that least).
fn bold_margin(fit: &Fit, distance: f64) -> f64 {
    let n = fit.scores.len();
    if n == 0 {
        return MIN_MARGIN;
    }
    let k = ((n as f64 * BOLD_QUANTILE).ceil() as usize).clamp(1, n) - 1;
    (fit.scores[k] * (SPREAD + distance)).max(MIN_MARGIN)
}

fn margin_words(fit: &Fit) -> String {
    match fit.scores.len() {
        0 => "no prediction checked yet".into(),
        n => format!("p97 of its errors on the last {n} trials left out, wider while they are few"),
    }
}

#[cfg(test)]
mod tests;
