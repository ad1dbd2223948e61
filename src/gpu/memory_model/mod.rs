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
//! The estimate admission uses is an upper bound: the prediction raised by a margin calibrated
//! from the model's own errors (each recently measured trial predicted by the current model
//! without that trial, leave-one-out, against its peak; scaled by how far the trial lies from the
//! others), wide while few are known and narrowing as they come, and at least as wide as what
//! the measured trials never varied leaves unknown (a deep trial after shallow ones), wider
//! still for a peak predicted beyond every measured one; measured trials whose memory-relevant
//! params are (almost) the same as the new one's raise it to their peak; and an out-of-memory
//! failure raises it near the failed params only, "near" measured in what the params do to
//! memory (a param of no effect does not make two trials far apart).
//!
//! Pure: no I/O, no clock. `docs/gpu-memory-model.md` explains it to users.

use super::fmt_gib;
use crate::study::{Distribution, ParamValue, Params, SearchSpace};
use fit::{own_effect, pair_drivers, ridge, select, Fit, Normal};
use std::collections::VecDeque;
use std::ops::Range;

mod fit;

/// Measured trials before the regression is trusted; until then the prior (or the largest peak
/// measured, if larger) with [`PRIOR_MARGIN`].
pub const MIN_MEASURED: usize = 3;
/// The margin on the prior and on early estimates, as a factor.
pub const PRIOR_MARGIN: f64 = 1.15;
/// Measured peaks kept (oldest forgotten first).
pub const MAX_SAMPLES: usize = 2000;
/// The most recently measured trials whose leave-one-out errors calibrate the margin: the
/// current model's errors, not those of the models that came before it (a model of 5 trials
/// errs far more than one of 40, and its errors would keep the bound wide for no reason).
pub const MAX_ERRORS: usize = 100;
/// The quantile of the (distance-scaled) leave-one-out errors the margin covers. With the
/// widening while errors are few and the local errors, it keeps under-estimates below the aim of
/// 1 admission in 100 (the unit tests' width × depth workload measures it), where p99 of at most
/// 100 errors would be their single largest, which keeps the bound wide.
pub const QUANTILE: f64 = 0.97;
/// Extra log-margin while errors are few: `EARLY / sqrt(n)` with n leave-one-out errors.
pub const EARLY: f64 = 0.3;
/// The smallest log-margin (measurement noise between runs of the same params).
pub const MIN_MARGIN: f64 = 0.02;
/// How an error scales with how far a trial is from every measured one (in predicted
/// log-peak): errors are calibrated as `error / (SPREAD + distance)`, so that a trial among
/// measured ones gets a narrow margin and one beyond them (extrapolated) a wide one.
pub const SPREAD: f64 = 0.1;
/// The least log-margin for what the measured trials leave unexplored: `UNEXPLORED × √u / n`,
/// `u` the squared length (in feature units) of the part of a trial's features that the `n`
/// measured ones never varied ([`Fit::unexplored`]). Leave-one-out errors speak only for trials
/// like the measured ones: with 3 to 7 measured, all shallow, a deep trial was predicted among
/// them and peaked at up to 4 times its bound (88 of 2000 such estimates low on the unit tests'
/// continuous workload over 400 seeds; 17 with this margin, 6 of 11200 from 12 measured on
/// either way). Fading as 1/n, it costs little once a dozen trials are measured.
pub const UNEXPLORED: f64 = 7.5;
/// The log-margin added for each unit of log-distance by which a prediction lies beyond the
/// largest peak measured: `BEYOND × ln(predicted / largest)`. Extrapolated past every measured
/// peak, a fit errs by its slopes' error times the distance, which none of its leave-one-out
/// errors shows (each of those trials was predicted among the others). Every out-of-memory
/// failure read in the two-daemon packing bench's kept runs was of this kind: its largest
/// config (14.0 GiB, width × depth 6672) predicted at 8.5 GiB after 13 trials whose largest
/// peak was 4.1 GiB and largest width × depth 1576. The first of each new size pays for it;
/// trials among the measured ones do not.
///
/// Only while the fit is linear in the params: once it has their products ([`PAIR_FROM`]),
/// it curves as a network's memory does, and that same config is predicted at 12.2 GiB, its
/// errors' margin making it 16.9 GiB. There the widening bought little safety (104 of 12000
/// estimates below the peak on the 7-param unit workload against 110 without it) at a cost
/// the packing bench showed: every large trial asked for most of the card until one of its
/// size was measured, so the line passed all of them until nothing else was left, and they
/// ran one at a time at the end of the study.
pub const BEYOND: f64 = 0.5;
/// Measured trials whose residuals correct a prediction locally.
pub const NEIGHBOURS: usize = 5;
/// Ridge penalty on the coefficients (features are in [0, 1]): a fixed part that matters while
/// trials are few (a fit on a handful of trials must not swing), and a part per trial.
pub const RIDGE_FIXED: f64 = 0.1;
pub const RIDGE: f64 = 1e-3;
/// The share of the smallest measured peak every trial is taken to hold (its CUDA context, the
/// framework's own buffers): the regression is of the log of what a trial holds above it, which
/// grows as a product of its sizes where the whole peak does not (a context plus a product).
/// Half: on the unit tests' width × depth workload the bound is then closer to the peak than
/// with none, and no less often above it; past about 0.7 the few smallest trials dominate.
pub const BASE_SHARE: f64 = 0.5;
/// Measured trials per param before the fit leaves out params that do not earn their place
/// ([`select`]). Selecting from 3 trials on, 5 of 200 estimates with 3 to 7 trials measured fell
/// below the peak on the unit tests' width × depth workload (a param that drives memory dropped
/// for want of trials that show it; none without selection), and from 8 trials on, 16 of 240
/// with 8 to 11 measured on their 7-param one (7 without); from 4 per param, no more than
/// without selection on either.
pub const MIN_SELECT: usize = 4;
/// The least change in log-peak across a param's own range for the admission line to call it
/// a driver of memory; a param whose coefficients stay below it may be left out of the fit
/// ([`select`]), one above it never is. Dropping any param that predicts the trials no worse
/// without it tightened the bound on the unit tests' 7-param workload (1.41 → 1.37 times the
/// peak at the median from 20 trials on, 300 seeds) only as far as it let more estimates fall
/// below the peak (82 → 97 of 12000); with this gate, 88 at 1.41.
pub const DRIVES: f64 = 0.05;
/// The most features of the params that drive memory that pair with each other in the fit
/// ([`pair_drivers`]): a fit's cost grows as the square of its features, and pairs as the square
/// of these (8 make 36 pairs at most).
pub const MAX_PAIRED: usize = 8;
/// Measured trials per param before the fit tries products ([`pair_drivers`]). From 3 (9 trials
/// for 3 params), on the unit tests' width × depth workload the bound with 8 to 11 measured went
/// from 1.35 to 1.27 times the peak at the median, with 1 of 1600 estimates below it where 3
/// had been (400 seeds); from 4 it stayed at 1.35. From 2, the 7-param workload's estimates with
/// 8 to 19 measured fell below the peak more often (104 of 3600, 94 without products).
pub const PAIR_FROM: usize = 3;
/// Two trials whose predicted log-peaks differ by less than this, param by param, count as the
/// same config: the larger of their measured peaks bounds the estimate.
pub const SAME_CONFIG: f64 = 0.01;
/// Measured trials of the same config whose largest peak is trusted as the bound on its own.
pub const SAME_CONFIG_TRUSTED: usize = 3;
/// An out-of-memory failure at `reached` bytes raises estimates within this distance (in
/// predicted log-peak) to `reached × OOM_GROWTH`.
pub const OOM_RADIUS: f64 = 0.1;
pub const OOM_GROWTH: f64 = 1.25;

/// What a trial is to the regression: one value per feature.
type Features = Vec<f64>;

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
struct Measured {
    x: Features,
    peak: u64,
    /// A trial still running, whose peak is the level it has settled at
    /// ([`MemoryModel::running`]): its id, until it ends and its measured peak replaces it.
    running: Option<i64>,
}

#[derive(Debug, Clone)]
struct OomFloor {
    x: Features,
    reached: u64,
    floor: u64,
}

/// The memory model (see the module documentation).
#[derive(Debug, Clone)]
pub struct MemoryModel {
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

impl MemoryModel {
    /// `prior` is `[gpu] trial_memory`, the guess until [`MIN_MEASURED`] trials are measured
    /// (0: no guess; then only `max_par_per_device` limits the first trials).
    pub fn new(space: &SearchSpace, prior: u64) -> MemoryModel {
        let mut m = MemoryModel {
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

    /// Live reload of `[gpu] trial_memory`.
    pub fn set_prior(&mut self, prior: u64) {
        self.prior = prior;
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
        let mut floor = (reached as f64 * OOM_GROWTH).ceil() as u64;
        if device_total > 0 {
            floor = floor.min(device_total);
        }
        if floor == 0 {
            return;
        }
        let x = self.features(params);
        self.floors.push_back(OomFloor { x, reached, floor });
        if self.floors.len() > MAX_SAMPLES {
            self.floors.pop_front();
        }
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

    /// The estimate for a trial of features `own` (before the fit's pairs).
    fn bound(&self, own: &[f64]) -> Estimate {
        let n = self.measured.len();
        let fit = self.fit.as_ref();
        let expanded = fit.map(|fit| fit.expand(own));
        let x = expanded.as_deref().unwrap_or(own);
        let largest = self.measured.iter().map(|m| m.peak).max().unwrap_or(0);
        // What is known before any fit: the user's guess, or the largest peak if larger.
        let (guess, guess_what) = if largest > self.prior {
            (largest, "the largest peak measured")
        } else {
            (self.prior, "trial_memory")
        };
        let guessed = with_prior_margin(guess);
        let (mut bytes, predicted, mut why) = match fit {
            None => {
                let progress = format!("{n} of {MIN_MEASURED} trials measured");
                if guess == 0 {
                    (
                        0,
                        0,
                        format!("no estimate yet: trial_memory unset, {progress}"),
                    )
                } else {
                    let why = format!(
                        "{}: {guess_what} ({}) x {PRIOR_MARGIN}, {progress}",
                        fmt_gib(guessed),
                        fmt_gib(guess)
                    );
                    (guessed, 0, why)
                }
            }
            Some(fit) => {
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
                        fmt_gib(largest)
                    ));
                }
                let running = match self.measured.iter().filter(|m| m.running.is_some()).count() {
                    0 => String::new(),
                    k => format!(", {k} of them running at their level"),
                };
                let why = format!(
                    "{}: {} fitted on {n} trials{running} ({}) + {:.0}% margin ({words})",
                    fmt_gib(b),
                    fmt_gib(predicted),
                    self.drivers(fit),
                    (margin.exp() - 1.0) * 100.0,
                );
                (b, predicted, why)
            }
        };
        let novel = fit.map(|fit| self.novel(fit, x)).unwrap_or_default();
        if let Some(fit) = fit {
            // Every trial holds at least what the smallest measured one did (its process's
            // CUDA context, the framework's own buffers): a fit does not go below that.
            let smallest = self.measured.iter().map(|m| m.peak).min().unwrap_or(0);
            if smallest > bytes {
                bytes = smallest;
                why.push_str(&format!(
                    ", raised to the smallest peak measured ({})",
                    fmt_gib(smallest)
                ));
            }
            // The same config measured before: its peaks are facts, not a fit. Measured
            // often enough, they are the bound; once or twice, they raise it. Not where a
            // param takes a value never measured: the fit cannot tell it apart from the rest.
            let same: Vec<u64> = if novel.is_empty() {
                // The fit's trials are the measured ones, in order (`Fit::distance_to`).
                let cx = fit.compact(x);
                self.measured
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| fit.distance_to(*i, &cx) < SAME_CONFIG)
                    .map(|(_, m)| m.peak)
                    .collect()
            } else {
                Vec::new()
            };
            if let Some(&peak) = same.iter().max() {
                let b = (peak as f64 * (1.0 + MIN_MARGIN)).ceil() as u64;
                if same.len() >= SAME_CONFIG_TRUSTED || b > bytes {
                    bytes = b;
                    why = format!(
                        "{}: the largest peak of {} measured trials of the same config ({}) + {:.0}%",
                        fmt_gib(b),
                        same.len(),
                        fmt_gib(peak),
                        MIN_MARGIN * 100.0
                    );
                }
            }
        }
        if !novel.is_empty() && guessed > bytes {
            // A value no measured trial had: the fit knows nothing of what it does to memory,
            // so the estimate is no lower than before anything was measured.
            bytes = guessed;
            why.push_str(&format!(
                ", raised to {} ({guess_what} {} x {PRIOR_MARGIN}): no trial measured yet with this {} value",
                fmt_gib(guessed),
                fmt_gib(guess),
                novel.join(", ")
            ));
        }
        // The highest out-of-memory floor near these params.
        let floor = self
            .floors
            .iter()
            .filter(|f| match fit {
                Some(fit) => fit.distance(&fit.expand(&f.x), x) <= OOM_RADIUS,
                None => f.x == own,
            })
            .max_by_key(|f| f.floor);
        if let Some(f) = floor {
            if f.floor > bytes {
                bytes = f.floor;
                why.push_str(&format!(
                    ", raised to {} by an out-of-memory failure at {} with these params' memory",
                    fmt_gib(f.floor),
                    fmt_gib(f.reached)
                ));
            }
        }
        Estimate {
            bytes,
            predicted,
            why,
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
        let base = fit.beta.len() - fit.pairs.len();
        for (name, cols) in self.names.iter().zip(self.columns()) {
            // The largest change in log-peak across the param's own range (its last column
            // says only whether a trial has it), and at most what its pairs add to it (every
            // feature that pairs lies in [0, 1]).
            let paired: f64 = fit
                .pairs
                .iter()
                .enumerate()
                .filter(|(_, (a, b))| cols.contains(a) || cols.contains(b))
                .map(|(k, _)| fit.beta[base + k].abs())
                .sum();
            let effect = own_effect(&fit.beta, &cols) + paired;
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

fn margin_words(fit: &Fit) -> String {
    match fit.scores.len() {
        0 => "no prediction checked yet".into(),
        n => format!("p97 of its errors on the last {n} trials left out, wider while they are few"),
    }
}

#[cfg(test)]
mod tests;
