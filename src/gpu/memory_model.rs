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
//! where they predict the trials better (a peak that is a sum of products curves in log sizes).
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
use std::collections::VecDeque;
use std::ops::Range;

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

/// The fitted model: the regression's coefficients (log-bytes above `base` per feature unit),
/// and each measured trial's features with its residual, for the local correction.
#[derive(Debug, Clone)]
struct Fit {
    /// Bytes every trial holds ([`BASE_SHARE`] of the smallest peak measured).
    base: f64,
    beta: Vec<f64>,
    intercept: f64,
    residuals: Vec<(Features, f64)>,
    /// Each feature's smallest and largest value among the measured trials: a feature they
    /// never varied says nothing of what it does to memory (its coefficient is 0 for want of
    /// data, not because it has no effect).
    lo: Vec<f64>,
    hi: Vec<f64>,
    /// The most recently measured trials' leave-one-out errors (`ln(peak)` − the prediction
    /// without them): (index into `residuals`, error, distance to the nearest other trial).
    loo: Vec<(usize, f64, f64)>,
    /// Those errors divided by `SPREAD + distance`, sorted.
    scores: Vec<f64>,
    /// The features' means, the Cholesky factor of `XᵀX + λI` (centred features) and λ: for
    /// [`Fit::unexplored`].
    mean: Vec<f64>,
    chol: Vec<f64>,
    lambda: f64,
    /// The columns of the params that earn their place in the fit ([`ridge`]); the others
    /// are 0 in every trial's features as the fit sees them.
    keep: Vec<bool>,
    /// The pairs of columns whose products follow a trial's own features ([`pair_drivers`]).
    pairs: Vec<(usize, usize)>,
}

impl Fit {
    /// A trial's features as this fit sees them: its own, then the products of the fit's pairs.
    fn expand(&self, x: &[f64]) -> Features {
        with_pairs(x, &self.pairs)
    }

    fn linear(&self, x: &[f64]) -> f64 {
        self.intercept + x.iter().zip(&self.beta).map(|(a, b)| a * b).sum::<f64>()
    }

    /// The regression, corrected by the residuals of the trials nearest in what their params do
    /// to memory: what a log-linear fit misses (a context added to a product, a branch with
    /// another slope) is learnt locally as trials come.
    fn predict(&self, x: &[f64]) -> f64 {
        self.linear(x) + self.correction(x, None).0
    }

    /// The local correction at `x` from the residuals of its nearest measured trials (leaving
    /// out the one at index `skip`), and the distance to the nearest of them.
    fn correction(&self, x: &[f64], skip: Option<usize>) -> (f64, f64) {
        let mut near: Vec<(f64, f64)> = Vec::with_capacity(NEIGHBOURS + 1);
        for (i, (xi, r)) in self.residuals.iter().enumerate() {
            if Some(i) == skip {
                continue;
            }
            let d = self.distance(xi, x);
            if near.len() < NEIGHBOURS || d < near[near.len() - 1].0 {
                let pos = near.partition_point(|(e, _)| *e <= d);
                near.insert(pos, (d, *r));
                near.truncate(NEIGHBOURS);
            }
        }
        let nearest = near.first().map_or(f64::INFINITY, |n| n.0);
        let (mut sum, mut weight) = (0.0, 0.0);
        for (d, r) in near {
            let w = 1.0 / (d + 0.01);
            sum += w * r;
            weight += w;
        }
        (if weight > 0.0 { sum / weight } else { 0.0 }, nearest)
    }

    /// How much of `x` the measured trials never varied: `λ · xcᵀ (XᵀX + λI)⁻¹ xc` (`xc` centred
    /// on their mean), near 0 for a trial within what they varied and the squared length of the
    /// rest where they did not (a depth of 8 when every measured trial had 1 or 2), in feature
    /// units; the ridge's own word for how little its coefficients there are known.
    fn unexplored(&self, x: &[f64]) -> f64 {
        self.unexplored_in(x, self.mean.len())
    }

    /// [`Fit::unexplored`] in the directions of the trial's own features only: its pairs are
    /// functions of them.
    fn unexplored_own(&self, x: &[f64]) -> f64 {
        self.unexplored_in(x, self.mean.len() - self.pairs.len())
    }

    /// [`Fit::unexplored`] in the first `cols` features, as if the fit had no others: the pairs
    /// come last, and the leading rows of a Cholesky factor are the factor of the leading block
    /// alone.
    fn unexplored_in(&self, x: &[f64], cols: usize) -> f64 {
        // A feature they never varied is a value never measured: `MemoryModel::novel` meets it
        // with the prior.
        let xc: Features = (0..cols)
            .map(|i| {
                if self.hi[i] - self.lo[i] < 1e-9 {
                    0.0
                } else {
                    x[i] - self.mean[i]
                }
            })
            .collect();
        self.lambda * forward_norm(&self.chol, &xc, self.mean.len())
    }

    /// How far `x` is from the nearest measured trial (infinite with none).
    fn nearest(&self, x: &[f64]) -> f64 {
        self.residuals
            .iter()
            .map(|(xi, _)| self.distance(xi, x))
            .fold(f64::INFINITY, f64::min)
    }

    /// How far apart two trials are in what their params do to memory: the predicted
    /// log-peak difference, feature by feature (root of the sum of squares).
    fn distance(&self, a: &[f64], b: &[f64]) -> f64 {
        a.iter()
            .zip(b)
            .zip(&self.beta)
            .map(|((x, y), w)| (w * (x - y)).powi(2))
            .sum::<f64>()
            .sqrt()
    }
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
                // Nor for a peak beyond every measured one.
                let beyond = (predicted as f64 / largest.max(1) as f64).ln().max(0.0);
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
                // `residuals` holds each measured trial's features as the fit sees them, in order.
                self.measured
                    .iter()
                    .zip(&fit.residuals)
                    .filter(|(_, (xi, _))| fit.distance(xi, x) < SAME_CONFIG)
                    .map(|(m, _)| m.peak)
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
        for (i, e, _) in &fit.loo {
            let d = fit.distance(&fit.residuals[*i].0, x);
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
        // choosing them costs a fit per param and round (a tenth of a second with 30 params and
        // 2000 trials): they are chosen again once a tenth more trials are recorded, not at
        // every record or settled level.
        let (normal, keep, pairs) = match &self.selection {
            Some(Selection { at, keep, pairs })
                if keep.len() == width + pairs.len() && self.recorded < at + (at / 10).max(1) =>
            {
                (
                    Normal::new(&self.measured, pairs),
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

/// Ridge regression of `ln(peak − base)` on the `keep` columns (those of the params that earn
/// their place, [`select`]), the intercept unpenalized (features and target centred), solved by
/// Cholesky on the normal equations; then each recently measured trial's leave-one-out error.
fn ridge(
    data: &VecDeque<Measured>,
    normal: &Normal,
    keep: Vec<bool>,
    pairs: Vec<(usize, usize)>,
) -> Fit {
    let (beta, chol) = normal.solve(&keep);
    let n = data.len() as f64;
    let d = normal.mean.len();
    let xs: Vec<Features> = data
        .iter()
        .map(|m| mask(&with_pairs(&m.x, &pairs), &keep))
        .collect();
    let mean = mask(&normal.mean, &keep);
    let intercept = normal.ymean - beta.iter().zip(&mean).map(|(w, m)| w * m).sum::<f64>();
    let mut lo = vec![f64::INFINITY; d];
    let mut hi = vec![f64::NEG_INFINITY; d];
    for x in &xs {
        for (j, v) in x.iter().enumerate() {
            lo[j] = lo[j].min(*v);
            hi[j] = hi[j].max(*v);
        }
    }
    let mut fit = Fit {
        base: normal.base,
        beta,
        intercept,
        residuals: Vec::new(),
        lo,
        hi,
        loo: Vec::new(),
        scores: Vec::new(),
        mean,
        chol,
        lambda: normal.lambda,
        keep,
        pairs,
    };
    fit.residuals = xs
        .into_iter()
        .zip(&normal.y)
        .map(|(x, y)| {
            let r = y - fit.linear(&x);
            (x, r)
        })
        .collect();
    let first = data.len().saturating_sub(MAX_ERRORS);
    let lone = lone(data);
    fit.loo = (first..data.len())
        .filter(|i| !lone[*i])
        .map(|i| {
            let (x, r) = &fit.residuals[i];
            // `chol` is the Cholesky factor L of XᵀX + λI: the leverage of trial i is
            // |L⁻¹ xcᵢ|² + 1/n, and its residual left out of the linear fit is rᵢ / (1 − leverage).
            let h = (fit.unexplored(x) / fit.lambda + 1.0 / n).min(0.99);
            let (correction, nearest) = fit.correction(x, Some(i));
            (i, r / (1.0 - h) - correction, nearest)
        })
        .collect();
    fit.scores = fit
        .loo
        .iter()
        .map(|(_, e, d)| e / (SPREAD + d.min(1e6)))
        .collect();
    fit.scores.sort_by(f64::total_cmp);
    fit
}

/// The normal equations of the measured trials, centred, on every feature: what each fit on
/// some of the params solves, built once for all of them ([`select`] tries many).
struct Normal {
    base: f64,
    /// Each trial's features, centred.
    xc: Vec<Features>,
    /// Each trial's target, `ln(peak − base)`, and their mean.
    y: Vec<f64>,
    ymean: f64,
    mean: Features,
    /// `XcᵀXc` (d × d, row-major) and `Xcᵀyc`.
    gram: Vec<f64>,
    xty: Vec<f64>,
    lambda: f64,
}

impl Normal {
    fn new(data: &VecDeque<Measured>, pairs: &[(usize, usize)]) -> Normal {
        let n = data.len() as f64;
        let xs: Vec<Features> = data.iter().map(|m| with_pairs(&m.x, pairs)).collect();
        let d = xs[0].len();
        let base = BASE_SHARE * data.iter().map(|m| m.peak).min().unwrap_or(0) as f64;
        let y: Vec<f64> = data
            .iter()
            .map(|m| (m.peak as f64 - base).max(1.0).ln())
            .collect();
        let ymean = y.iter().sum::<f64>() / n;
        let mut mean = vec![0.0; d];
        for x in &xs {
            for (a, x) in mean.iter_mut().zip(x) {
                *a += x / n;
            }
        }
        let xc: Vec<Features> = xs
            .iter()
            .map(|x| x.iter().zip(&mean).map(|(x, mu)| x - mu).collect())
            .collect();
        let mut gram = vec![0.0; d * d];
        let mut xty = vec![0.0; d];
        for (x, y) in xc.iter().zip(&y) {
            let yc = y - ymean;
            for i in 0..d {
                xty[i] += x[i] * yc;
                for j in 0..=i {
                    gram[i * d + j] += x[i] * x[j];
                }
            }
        }
        for i in 0..d {
            for j in 0..i {
                gram[j * d + i] = gram[i * d + j];
            }
        }
        Normal {
            base,
            xc,
            y,
            ymean,
            mean,
            gram,
            xty,
            lambda: RIDGE_FIXED + RIDGE * n,
        }
    }

    /// The coefficients of the fit on the `keep` columns (0 on the others), and the Cholesky
    /// factor of its `XᵀX + λI`.
    fn solve(&self, keep: &[bool]) -> (Vec<f64>, Vec<f64>) {
        let d = keep.len();
        let mut a = vec![0.0; d * d];
        for i in 0..d {
            for j in 0..d {
                if keep[i] && keep[j] {
                    a[i * d + j] = self.gram[i * d + j];
                }
            }
            a[i * d + i] += self.lambda;
        }
        let b = mask(&self.xty, keep);
        let beta = cholesky_solve(&mut a, &b, d);
        (beta, a)
    }

    /// The fit's error on the recently measured trials, each left out (PRESS: the sum of their
    /// squared leave-one-out residuals), for the fit on the `keep` columns.
    fn press(&self, keep: &[bool]) -> f64 {
        let (beta, chol) = self.solve(keep);
        let n = self.y.len();
        let d = keep.len();
        (n.saturating_sub(MAX_ERRORS)..n)
            .map(|i| {
                let x = mask(&self.xc[i], keep);
                let r =
                    self.y[i] - self.ymean - x.iter().zip(&beta).map(|(a, b)| a * b).sum::<f64>();
                let h = (forward_norm(&chol, &x, d) + 1.0 / n as f64).min(0.99);
                (r / (1.0 - h)).powi(2)
            })
            .sum()
    }
}

/// The params that earn their place in the fit, as the columns kept: backward elimination on
/// the leave-one-out error, from every param, dropping while some param whose coefficients are
/// below [`DRIVES`] predicts the recently measured trials no worse without it, the one whose
/// removal predicts them best first. Not before [`MIN_SELECT`] trials per param are measured.
///
/// A param of no effect on memory then has no coefficient at all, rather than the small one a
/// dozen noisy trials give it, which made trials of the same config that differ only in it look
/// apart (the peaks of one did not bound the others) and left its unexplored directions in the
/// margin ([`Fit::unexplored`]). A param that drives memory predicts the trials better with it,
/// and stays.
fn select(normal: &Normal, groups: &[Range<usize>]) -> Vec<bool> {
    let mut keep = vec![true; normal.mean.len()];
    if normal.y.len() < MIN_SELECT.saturating_mul(groups.len()) {
        return keep;
    }
    let mut error = normal.press(&keep);
    let mut kept: Vec<&Range<usize>> = groups.iter().collect();
    while kept.len() > 1 {
        let (beta, _) = normal.solve(&keep);
        let mut best: Option<(usize, f64, Vec<bool>)> = None;
        for (k, cols) in kept.iter().enumerate() {
            if largest(&beta[(*cols).clone()]) >= DRIVES {
                continue;
            }
            let mut without = keep.clone();
            without[(*cols).clone()].fill(false);
            let e = normal.press(&without);
            if e <= error && best.as_ref().is_none_or(|b| e < b.1) {
                best = Some((k, e, without));
            }
        }
        let Some((k, e, without)) = best else { break };
        kept.remove(k);
        keep = without;
        error = e;
    }
    keep
}

/// The fit's pairs: from [`PAIR_FROM`] measured trials per param on, the product of every two
/// features ([`MemoryModel::picks`]) of the params that drive memory (each numeric one with
/// itself too; a param of no effect takes part in none, as its products would be noise), kept
/// only if the recently measured trials are predicted better with them (the leave-one-out
/// error). Returns the normal equations, the columns kept and the pairs.
///
/// A network's peak is a sum of products (weights and optimizer state ∝ width² × depth, about
/// 3 times as much with Adam; activations ∝ batch × width × depth; on top of a context), which
/// is not linear in the params' log sizes: in log-peak it curves, and a linear fit extrapolates
/// the slope of the term that rules among the trials measured to where the other rules. Pairs
/// make the fit quadratic in them.
fn pair_drivers(
    data: &VecDeque<Measured>,
    normal: Normal,
    groups: &[Range<usize>],
    picks: &[(usize, usize)],
    keep: Vec<bool>,
) -> (Normal, Vec<bool>, Vec<(usize, usize)>) {
    if data.len() < PAIR_FROM.saturating_mul(groups.len()) {
        return (normal, keep, Vec::new());
    }
    let (beta, _) = normal.solve(&keep);
    // The drivers, the strongest first, their features up to `MAX_PAIRED`.
    let mut drivers: Vec<(f64, usize)> = groups
        .iter()
        .enumerate()
        .map(|(p, cols)| (own_effect(&beta, cols), p))
        .filter(|(effect, _)| *effect >= DRIVES)
        .collect();
    drivers.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut chosen: Vec<(usize, usize)> = Vec::new();
    for (_, p) in drivers {
        let its: Vec<(usize, usize)> = picks.iter().filter(|q| q.1 == p).copied().collect();
        if chosen.len() + its.len() <= MAX_PAIRED {
            chosen.extend(its);
        }
    }
    let pairs: Vec<(usize, usize)> = chosen
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            // A categorical's choices with each other are 0, or the choice itself.
            let numeric = chosen.iter().filter(|q| q.1 == a.1).count() == 1;
            chosen[i..]
                .iter()
                .enumerate()
                .filter(move |(k, b)| if *k == 0 { numeric } else { b.1 != a.1 })
                .map(move |(_, b)| (a.0, b.0))
        })
        .collect();
    if pairs.is_empty() {
        return (normal, keep, Vec::new());
    }
    let wide = Normal::new(data, &pairs);
    let mut with = keep.clone();
    with.resize(keep.len() + pairs.len(), true);
    if wide.press(&with) < normal.press(&keep) {
        (wide, with, pairs)
    } else {
        (normal, keep, Vec::new())
    }
}

/// `x` with the product of each of `pairs` of its features appended.
fn with_pairs(x: &[f64], pairs: &[(usize, usize)]) -> Features {
    let mut out = Vec::with_capacity(x.len() + pairs.len());
    out.extend_from_slice(x);
    out.extend(pairs.iter().map(|&(a, b)| x[a] * x[b]));
    out
}

/// The largest of `beta` in absolute value: a param's effect on log-peak across its range, from
/// its coefficients.
fn largest(beta: &[f64]) -> f64 {
    beta.iter().fold(0.0f64, |a, b| a.max(b.abs()))
}

/// A param's effect from the coefficients of its columns `cols`, leaving out the last, which
/// says only whether a trial has the param.
fn own_effect(beta: &[f64], cols: &Range<usize>) -> f64 {
    largest(&beta[cols.start..cols.end - 1])
}

/// `|L⁻¹ x|²` for the Cholesky factor `L` (d × d, row-major, lower), or for its leading
/// `x.len()` rows and columns where `x` is shorter.
fn forward_norm(chol: &[f64], x: &[f64], d: usize) -> f64 {
    let mut z = vec![0.0; x.len()];
    for i in 0..x.len() {
        let s = x[i] - (0..i).map(|k| chol[i * d + k] * z[k]).sum::<f64>();
        z[i] = s / chol[i * d + i];
    }
    z.iter().map(|v| v * v).sum()
}

/// `x` with the columns not kept at 0.
fn mask(x: &[f64], keep: &[bool]) -> Features {
    x.iter()
        .zip(keep)
        .map(|(v, k)| if *k { *v } else { 0.0 })
        .collect()
}

/// The trials that alone have their value of some feature (the one trial of a categorical
/// choice, say): left out, the fit has never seen that value and predicts it as the others, so
/// its leave-one-out error is the error of a value never measured, which [`MemoryModel::novel`]
/// meets with the prior, not the model's error on trials like those it has measured. Counted
/// among the errors, one such trial (a first large trial among small ones: a 2.5 GiB and a
/// 6.8 GiB mode) made the margin +275% for every trial near it, and the next large trial
/// waited for a bound of the whole card.
fn lone(data: &VecDeque<Measured>) -> Vec<bool> {
    let n = data.len();
    let mut out = vec![false; n];
    let Some(first) = data.front() else {
        return out;
    };
    let same = |a: f64, b: f64| (a - b).abs() <= 1e-9;
    for j in 0..first.x.len() {
        let v = first.x[j];
        let differ: Vec<usize> = (1..n).filter(|&i| !same(data[i].x[j], v)).collect();
        match differ.len() {
            // One trial has another value than all the rest.
            1 => out[differ[0]] = true,
            // All but the first have another value: the first is alone if they share theirs.
            k if k + 1 == n && k > 1 => {
                let w = data[differ[0]].x[j];
                if differ.iter().all(|&i| same(data[i].x[j], w)) {
                    out[0] = true;
                }
            }
            _ => {}
        }
    }
    out
}

/// Solves `A x = b` for a symmetric positive definite `A` (d × d, row-major, overwritten).
fn cholesky_solve(a: &mut [f64], b: &[f64], d: usize) -> Vec<f64> {
    for j in 0..d {
        let mut s = a[j * d + j];
        for k in 0..j {
            s -= a[j * d + k] * a[j * d + k];
        }
        let diag = s.max(1e-12).sqrt();
        a[j * d + j] = diag;
        for i in j + 1..d {
            let mut s = a[i * d + j];
            for k in 0..j {
                s -= a[i * d + k] * a[j * d + k];
            }
            a[i * d + j] = s / diag;
        }
    }
    let mut y = vec![0.0; d];
    for i in 0..d {
        let mut s = b[i];
        for k in 0..i {
            s -= a[i * d + k] * y[k];
        }
        y[i] = s / a[i * d + i];
    }
    let mut x = vec![0.0; d];
    for i in (0..d).rev() {
        let mut s = y[i];
        for k in i + 1..d {
            s -= a[k * d + i] * x[k];
        }
        x[i] = s / a[i * d + i];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::ParamSpec;
    use rand::{Rng, SeedableRng};

    const MIB: u64 = 1 << 20;

    fn space() -> SearchSpace {
        SearchSpace {
            params: vec![
                ParamSpec {
                    name: "width".into(),
                    dist: Distribution::Int {
                        low: 64,
                        high: 2048,
                        step: 1,
                        log: false,
                    },
                },
                ParamSpec {
                    name: "depth".into(),
                    dist: Distribution::Int {
                        low: 1,
                        high: 16,
                        step: 1,
                        log: false,
                    },
                },
                ParamSpec {
                    name: "lr".into(),
                    dist: Distribution::Float {
                        low: 1e-5,
                        high: 1e-1,
                        step: None,
                        log: true,
                    },
                },
            ],
        }
    }

    fn params(width: i64, depth: i64, lr: f64) -> Params {
        [
            ("width".to_owned(), ParamValue::Int(width)),
            ("depth".to_owned(), ParamValue::Int(depth)),
            ("lr".to_owned(), ParamValue::Float(lr)),
        ]
        .into_iter()
        .collect()
    }

    /// A network's memory: a context plus activations that grow with width × depth.
    fn peak(width: i64, depth: i64) -> u64 {
        500 * MIB + (width as u64 * depth as u64) * 2 * MIB / 8
    }

    #[test]
    fn a_param_that_does_not_drive_memory_has_no_say() {
        let mut m = MemoryModel::new(&space(), 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for _ in 0..60 {
            let (w, d) = (rng.gen_range(64..=2048), rng.gen_range(1..=16));
            let lr = 10f64.powf(rng.gen_range(-5.0..-1.0));
            m.record(&params(w, d, lr), peak(w, d));
        }
        // The same sizes with the smallest and the largest learning rate: the same estimate.
        let a = m.expected(&params(512, 8, 1e-5));
        let b = m.expected(&params(512, 8, 1e-1));
        let ratio = a as f64 / b as f64;
        assert!(
            (0.97..1.03).contains(&ratio),
            "lr moved the estimate: {a} vs {b}"
        );
        let why = m.estimate(&params(512, 8, 1e-3)).why;
        assert!(why.contains("lr does not"), "{why}");
        assert!(why.contains("width") && why.contains("depth"), "{why}");
    }

    #[test]
    fn the_bound_covers_the_true_peak_and_stays_close_to_it() {
        let mut m = MemoryModel::new(&space(), 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let (mut under, mut over) = (0, Vec::new());
        for i in 0..400 {
            let (w, d) = (rng.gen_range(64..=2048), rng.gen_range(1..=16));
            let lr = 10f64.powf(rng.gen_range(-5.0..-1.0));
            let p = params(w, d, lr);
            let truth = peak(w, d);
            if i >= 50 {
                let e = m.expected(&p);
                if e < truth {
                    under += 1;
                }
                over.push(e as f64 / truth as f64);
            }
            m.record(&p, truth);
        }
        // The aim: fewer than 1 in 100 admissions under-estimated.
        assert!(under <= 3, "{under} of 350 estimates were below the peak");
        over.sort_by(f64::total_cmp);
        let median = over[over.len() / 2];
        eprintln!(
            "trials 50-399: {under} of {} estimates below the peak; estimate/peak median {median:.2}",
            over.len()
        );
        assert!(
            median < 1.35,
            "the bound is loose: median estimate/peak {median:.2}"
        );
    }

    /// The bench's continuous workload (`bench/gpu_bench.py`): width 64–1024 on a log scale,
    /// depth 1–8, and a learning rate of no effect.
    fn continuous_space() -> SearchSpace {
        SearchSpace {
            params: vec![
                ParamSpec {
                    name: "width".into(),
                    dist: Distribution::Int {
                        low: 64,
                        high: 1024,
                        step: 1,
                        log: true,
                    },
                },
                ParamSpec {
                    name: "depth".into(),
                    dist: Distribution::Int {
                        low: 1,
                        high: 8,
                        step: 1,
                        log: false,
                    },
                },
                space().params[2].clone(),
            ],
        }
    }

    /// Its peaks: a 500 MiB context, and 512 MiB + 2 MiB × width × depth (× `noise`) in 20 MiB
    /// allocator segments.
    fn continuous_peak(width: i64, depth: i64, noise: f64) -> u64 {
        let segment = 20 * MIB;
        let alloc = ((512 * MIB + width as u64 * depth as u64 * 2 * MIB) as f64 * noise) as u64;
        500 * MIB + alloc.div_ceil(segment) * segment
    }

    /// Of the estimates made with `from` to `to − 1` trials measured (`ratios`: trials measured,
    /// estimate / peak), how many fell below the peak, of how many, and the median estimate /
    /// peak; printed with the lowest (`--nocapture`).
    fn shortfalls(ratios: &[(usize, f64)], from: usize, to: usize) -> (usize, usize, f64) {
        let mut r: Vec<f64> = ratios
            .iter()
            .filter(|(i, _)| (from..to).contains(i))
            .map(|r| r.1)
            .collect();
        r.sort_by(f64::total_cmp);
        let low = r.iter().filter(|x| **x < 1.0).count();
        eprintln!(
            "trials {from}-{}: {low} of {} estimates below the peak, the lowest at {:.2}; \
             estimate/peak median {:.2}",
            to - 1,
            r.len(),
            r[0],
            r[r.len() / 2]
        );
        (low, r.len(), r[r.len() / 2])
    }

    /// The continuous workload, ±2% from trial to trial: peaks of 1 to 17 GiB, with the default
    /// prior. What `docs/gpu-memory-model.md` says of the learning phase comes from here (run
    /// with `--nocapture` for the figures): the prior falls short now and then (it is a guess);
    /// from 3 trials measured on, the aim of fewer than 1 in 100 holds.
    #[test]
    fn estimates_fall_short_while_few_trials_are_measured_and_rarely_after() {
        let space = continuous_space();
        // (trials measured before the estimate, estimate / peak)
        let mut ratios: Vec<(usize, f64)> = Vec::new();
        for seed in 0..40 {
            let mut m = MemoryModel::new(&space, 6 << 30);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            for i in 0..40 {
                let w = (64.0 * 16f64.powf(rng.gen_range(0.0..1.0))).round() as i64;
                let d = rng.gen_range(1..=8);
                let lr = 10f64.powf(rng.gen_range(-5.0..-1.0));
                let peak = continuous_peak(w, d, 1.0 + 0.02 * rng.gen_range(-1.0..1.0));
                let p = params(w, d, lr);
                ratios.push((i, m.expected(&p) as f64 / peak as f64));
                m.record(&p, peak);
            }
        }
        let under = |from: usize, to: usize| shortfalls(&ratios, from, to);
        under(0, MIN_MEASURED);
        let (early, n_early, _) = under(MIN_MEASURED, 8);
        let (middle, n_middle, middle_median) = under(8, 12);
        let (low, n, median) = under(12, 40);
        // Before `UNEXPLORED`, 9 of the 200 estimates with 3 to 7 measured were low.
        assert!(
            (early + middle) * 100 < n_early + n_middle,
            "{} of {} estimates below the peak with 3 to 11 trials measured",
            early + middle,
            n_early + n_middle
        );
        assert!(low * 100 < n, "{low} of {n} estimates below the peak");
        // Linear in the params' log sizes, the fit's bound was 1.15 times the peak here; with
        // the products of the params that drive memory (`pair_drivers`), 1.10.
        assert!(
            median < 1.13,
            "estimate/peak median {median:.2} from 12 measured on"
        );
        // With products only from 4 trials per param (`PAIR_FROM`), 1.33 with 8 to 11
        // measured; from 3, 1.26.
        assert!(
            middle_median < 1.30,
            "estimate/peak median {middle_median:.2} with 8 to 11 measured"
        );
    }

    /// A richer space than the bench's: 7 params, of which width, depth, batch and the optimizer
    /// drive memory in two terms (weights and optimizer state ∝ width² × depth, 3 times as much
    /// with Adam; activations ∝ batch × width × depth) and lr, dropout and weight decay do not;
    /// peaks of 0.8 to 16 GiB. A sum of two products is not log-linear: the fit curves with the
    /// products of the params that drive memory from 21 trials measured on, and leans on its
    /// local correction and its margins before. Run with `--nocapture` for the
    /// figures (`docs/gpu-memory-model.md` quotes them): the aim of fewer than 1 in 100 estimates
    /// below the peak holds from 20 trials measured on; before that it does not (2 to 3 in 100,
    /// large Adam trials with small batches, down to half their peak).
    #[test]
    fn two_memory_terms_over_seven_params_are_covered_from_20_trials_on() {
        let int = |name: &str, low: i64, high: i64, log: bool| ParamSpec {
            name: name.into(),
            dist: Distribution::Int {
                low,
                high,
                step: 1,
                log,
            },
        };
        let float = |name: &str, low: f64, high: f64, log: bool| ParamSpec {
            name: name.into(),
            dist: Distribution::Float {
                low,
                high,
                step: None,
                log,
            },
        };
        let space = SearchSpace {
            params: vec![
                int("width", 64, 1024, true),
                int("depth", 1, 12, false),
                int("batch", 16, 256, true),
                float("lr", 1e-5, 1e-1, true),
                float("dropout", 0.0, 0.5, false),
                float("wd", 1e-6, 1e-2, true),
                ParamSpec {
                    name: "opt".into(),
                    dist: Distribution::Categorical {
                        choices: vec![serde_json::json!("sgd"), serde_json::json!("adam")],
                    },
                },
            ],
        };
        let mut ratios: Vec<(usize, f64)> = Vec::new();
        for seed in 0..60 {
            let mut m = MemoryModel::new(&space, 6 << 30);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            for i in 0..60 {
                let w = (64.0 * 16f64.powf(rng.gen_range(0.0..1.0))).round() as i64;
                let d = rng.gen_range(1..=12);
                let b = (16.0 * 16f64.powf(rng.gen_range(0.0..1.0))).round() as i64;
                let opt = rng.gen_range(0..2usize);
                let weights = (w * w * d) as f64 * 256.0 * if opt == 1 { 3.0 } else { 1.0 };
                let activations = (b * w * d) as f64 * 2048.0;
                let noise = 1.0 + 0.02 * rng.gen_range(-1.0..1.0);
                let peak = (500.0 * MIB as f64
                    + (300.0 * MIB as f64 + weights + activations) * noise)
                    as u64;
                let p: Params = [
                    ("width", ParamValue::Int(w)),
                    ("depth", ParamValue::Int(d)),
                    ("batch", ParamValue::Int(b)),
                    (
                        "lr",
                        ParamValue::Float(10f64.powf(rng.gen_range(-5.0..-1.0))),
                    ),
                    ("dropout", ParamValue::Float(rng.gen_range(0.0..0.5))),
                    (
                        "wd",
                        ParamValue::Float(10f64.powf(rng.gen_range(-6.0..-2.0))),
                    ),
                    ("opt", ParamValue::Choice(opt)),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
                ratios.push((i, m.expected(&p) as f64 / peak as f64));
                m.record(&p, peak);
            }
        }
        let under = |from: usize, to: usize| shortfalls(&ratios, from, to);
        under(MIN_MEASURED, 8);
        under(8, 20);
        let (low, n, median) = under(20, 60);
        assert!(low * 100 < n, "{low} of {n} estimates below the peak");
        // Linear, the bound was 1.40 times the peak here; with the products, 1.27.
        assert!(
            median < 1.34,
            "estimate/peak median {median:.2} from 20 measured on"
        );
    }

    /// Asserts that the estimate `e` is at least `peak` and says `words` in its explanation.
    fn covers(e: &Estimate, peak: u64, words: &str) {
        eprintln!("peak {}; {}", fmt_gib(peak), e.why);
        assert!(
            e.bytes >= peak,
            "{} for a peak of {}: {}",
            fmt_gib(e.bytes),
            fmt_gib(peak),
            e.why
        );
        assert!(e.why.contains(words), "{}", e.why);
    }

    /// The worst under-estimates of the continuous workload's learning phase: the first trials
    /// measured were all shallow, the fit predicted a deep one among them, with a margin from
    /// their errors alone, and it peaked at up to 4 times its bound (2.5 GiB for 9.7 here).
    #[test]
    fn a_trial_deeper_than_any_measured_is_not_expected_at_their_size() {
        let mut m = MemoryModel::new(&continuous_space(), 6 << 30);
        for (w, d, lr) in [
            (300, 1, 1e-2),
            (150, 2, 1e-4),
            (520, 1, 1e-3),
            (90, 2, 3e-5),
        ] {
            m.record(&params(w, d, lr), continuous_peak(w, d, 1.0));
        }
        let deep = m.estimate(&params(560, 8, 1e-3));
        covers(
            &deep,
            continuous_peak(560, 8, 1.0),
            "beyond what the measured trials varied",
        );
        // Among what they varied, the errors' margin still rules.
        let among = m.estimate(&params(200, 1, 1e-3));
        assert!(among.why.contains("p97 of its errors"), "{}", among.why);
    }

    /// The two-daemon packing bench's out-of-memory failure, replayed from a kept run: 13
    /// trials of its second study measured, none larger than 4.1 GiB (width × depth at most
    /// 1576), then its largest config (834 × 8, 14.0 GiB). The fit's slopes, right among the
    /// measured trials, were short of the product's: it predicted 8.5 GiB, and its errors' margin
    /// made that 12.0 GiB, admitted beside other trials on a full card.
    #[test]
    fn the_largest_config_after_small_ones_is_not_expected_at_their_slope() {
        let mut m = MemoryModel::new(&continuous_space(), 6 << 30);
        for (w, d, lr, mib) in [
            (788, 2, 1.06e-05, 4220),
            (114, 1, 2.48e-05, 1240),
            (174, 2, 1.72e-04, 1720),
            (652, 2, 9.26e-05, 3640),
            (127, 4, 1.11e-04, 2060),
            (65, 3, 4.40e-05, 1420),
            (288, 3, 3.40e-05, 2720),
            (96, 3, 7.07e-04, 1580),
            (67, 7, 5.71e-02, 1940),
            (177, 1, 3.69e-03, 1360),
            (81, 6, 2.60e-03, 2000),
            (210, 4, 1.15e-05, 2700),
            (95, 3, 4.84e-05, 1600),
        ] {
            m.record(&params(w, d, lr), mib * MIB);
        }
        let largest = m.estimate(&params(834, 8, 2.44e-02));
        covers(&largest, 14300 * MIB, "beyond the largest peak measured");
        // A trial among the measured ones pays nothing for it.
        let among = m.estimate(&params(200, 3, 1e-3));
        assert!(!among.why.contains("largest peak"), "{}", among.why);
    }

    /// A categorical `mem` ("small" or "large") that drives memory, and `lr`, which does not.
    fn mode_space() -> SearchSpace {
        SearchSpace {
            params: vec![
                ParamSpec {
                    name: "mem".into(),
                    dist: Distribution::Categorical {
                        choices: vec![serde_json::json!("small"), serde_json::json!("large")],
                    },
                },
                ParamSpec {
                    name: "lr".into(),
                    dist: Distribution::Float {
                        low: 1e-5,
                        high: 1e-1,
                        step: None,
                        log: true,
                    },
                },
            ],
        }
    }

    /// Params of [`mode_space`]: the `mem` choice's index and `lr`.
    fn mode_params(mode: usize, lr: f64) -> Params {
        [
            ("mem".to_owned(), ParamValue::Choice(mode)),
            ("lr".to_owned(), ParamValue::Float(lr)),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn a_bimodal_workload_is_learnt_per_mode() {
        let (space, p) = (mode_space(), mode_params);
        let mut m = MemoryModel::new(&space, 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        // Mostly large trials: a small one must still be expected small.
        for i in 0..40 {
            let mode = usize::from(i % 5 != 0);
            let truth = if mode == 0 { 2548 * MIB } else { 6644 * MIB };
            m.record(&p(mode, 10f64.powf(rng.gen_range(-5.0..-1.0))), truth);
        }
        let small = m.expected(&p(0, 1e-3));
        let large = m.expected(&p(1, 1e-3));
        assert!(
            (2548 * MIB..2900 * MIB).contains(&small),
            "small {}",
            fmt_gib(small)
        );
        assert!(
            (6644 * MIB..7300 * MIB).contains(&large),
            "large {}",
            fmt_gib(large)
        );
    }

    /// Regression (the bench's bimodal workload): nine small trials and one large measured;
    /// the large one, left out, was predicted small, and that error set the margin near it to
    /// +275%, so the next large trial was expected at 24.9 GiB for a 6.6 GiB peak.
    #[test]
    fn the_one_trial_of_a_mode_does_not_make_the_margin_near_it_its_novelty_error() {
        let (space, p) = (mode_space(), mode_params);
        let mut m = MemoryModel::new(&space, 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let mut lr = || 10f64.powf(rng.gen_range(-5.0..-1.0));
        for i in 0..10 {
            let (mode, truth) = if i == 5 {
                (1, 6760 * MIB)
            } else {
                (0, 2520 * MIB + i * 20 * MIB)
            };
            m.record(&p(mode, lr()), truth);
        }
        let large = m.estimate(&p(1, lr()));
        assert!(
            (6760 * MIB..9 << 30).contains(&large.bytes),
            "{}",
            large.why
        );
        let small = m.expected(&p(0, lr()));
        assert!(small < 3 << 30, "small {}", fmt_gib(small));
    }

    /// Regression (the bench's bimodal workload): with 10 trials measured, a fit that gave the
    /// learning rate a small slope (noise) expected large trials at 7.3 to 7.9 GiB for a
    /// 6.5 GiB peak, "(mem, lr drive memory) + 22% margin", since trials of the large mode with
    /// other learning rates neither counted as the same config nor left lr's directions
    /// explored (here: 11.0 GiB, "+65% margin (wide where these params lie beyond what the
    /// measured trials varied)"). Left out of the fit, lr makes them the same config.
    #[test]
    fn trials_that_differ_only_in_a_param_of_no_effect_bound_each_other() {
        let (space, p) = (mode_space(), mode_params);
        let mut m = MemoryModel::new(&space, 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut lr = || 10f64.powf(rng.gen_range(-5.0..-1.0));
        let noise = [0, 20, 40, 0, 20, 60, 0, 40];
        for (i, n) in noise.iter().enumerate() {
            let (mode, truth) = if i % 2 == 0 {
                (0, 2540 * MIB + n * MIB)
            } else {
                (1, 6640 * MIB + n * MIB)
            };
            m.record(&p(mode, lr()), truth);
        }
        let large = m.estimate(&p(1, lr()));
        assert!(
            large.why.contains("measured trials of the same config"),
            "{}",
            large.why
        );
        assert!(large.bytes < 6900 * MIB, "{}", large.why);
    }

    #[test]
    fn a_mode_never_measured_is_expected_at_the_prior_not_at_the_measured_one() {
        let (space, p) = (mode_space(), mode_params);
        let mut m = MemoryModel::new(&space, 6 << 30);
        // Only small trials so far: the fit cannot tell a large one from them.
        for lr in [1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 3e-3] {
            m.record(&p(0, lr), 2548 * MIB);
        }
        let small = m.estimate(&p(0, 1e-3));
        assert!(small.bytes < 2700 * MIB, "{}", small.why);
        let large = m.estimate(&p(1, 1e-3));
        let prior = ((6u64 << 30) as f64 * PRIOR_MARGIN).ceil() as u64;
        assert!(large.bytes >= prior, "{}", large.why);
        assert!(
            large
                .why
                .contains("no trial measured yet with this mem value"),
            "{}",
            large.why
        );
        // Once measured, the large mode is learnt like the small one: covered, then close.
        for lr in [1e-5, 1e-3, 1e-1] {
            m.record(&p(1, lr), 6644 * MIB);
        }
        let large = m.estimate(&p(1, 1e-4));
        assert!(large.bytes >= 6644 * MIB, "{}", large.why);
        assert!(m.estimate(&p(0, 1e-4)).bytes < 2700 * MIB);
        for lr in [3e-5, 3e-4, 3e-2, 1e-2, 1e-4] {
            m.record(&p(1, lr), 6644 * MIB);
        }
        let large = m.estimate(&p(1, 2e-3));
        assert!(
            (6644 * MIB..7000 * MIB).contains(&large.bytes),
            "{}",
            large.why
        );
    }

    #[test]
    fn the_bound_narrows_once_the_model_stops_making_its_early_errors() {
        let mut m = MemoryModel::new(&space(), 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut late = Vec::new();
        for i in 0..130 {
            let (w, d) = (rng.gen_range(64..=2048), rng.gen_range(1..=16));
            let p = params(w, d, 10f64.powf(rng.gen_range(-5.0..-1.0)));
            let truth = peak(w, d);
            if i >= 90 {
                let e = m.expected(&p);
                assert!(e >= truth, "trial {i} under-estimated");
                late.push(e as f64 / truth as f64);
            }
            m.record(&p, truth);
        }
        late.sort_by(f64::total_cmp);
        // Errors of the first trials' fits (tens of percent) no longer widen it.
        let median = late[late.len() / 2];
        assert!(median < 1.25, "median estimate/peak {median:.3}");
    }

    #[test]
    fn trials_settled_at_their_level_are_learnt_from_while_they_run_and_forgotten_when_they_end() {
        let measured = [(64, 1), (1024, 2), (128, 4)];
        let running = [(10, 256, 7), (11, 512, 8), (12, 128, 8)];
        let mut m = MemoryModel::new(&continuous_space(), 6 << 30);
        // The same trials, all of them ended and measured at those levels.
        let mut all = m.clone();
        for (w, d) in measured {
            m.record(&params(w, d, 1e-3), continuous_peak(w, d, 1.0));
            all.record(&params(w, d, 1e-3), continuous_peak(w, d, 1.0));
        }
        let deep = params(256, 8, 1e-3);
        let before = m.estimate(&deep);
        let running: Vec<(i64, Params, u64)> = running
            .into_iter()
            .map(|(id, w, d)| (id, params(w, d, 1e-2), continuous_peak(w, d, 1.0)))
            .collect();
        m.running(running.iter().map(|(id, p, l)| (*id, p, *l)));
        for (_, p, l) in &running {
            all.record(p, *l);
        }
        let (during, ended) = (m.estimate(&deep), all.estimate(&deep));
        assert_eq!(
            (during.bytes, during.predicted),
            (ended.bytes, ended.predicted)
        );
        // Deep trials measured, a deep one is no longer beyond what the model knows.
        let truth = continuous_peak(256, 8, 1.0);
        assert!(
            during.bytes < before.bytes && during.bytes >= truth,
            "{before:?} then {during:?}, peak {truth}"
        );
        assert!(
            during.why.contains("fitted on 6 trials, 3 of them running"),
            "{}",
            during.why
        );
        // Given again with a higher level: raised, not added twice.
        m.running(running.iter().map(|(id, p, l)| (*id, p, l + (1 << 30))));
        assert_eq!(m.measured(), 6);
        // One ended, one is no longer given (no longer settled): both gone.
        m.ended(10);
        m.running(running[1..2].iter().map(|(id, p, l)| (*id, p, *l)));
        assert_eq!(m.measured(), 4);
        m.ended(11);
        assert_eq!(m.estimate(&deep), before);
    }

    #[test]
    fn the_prior_rules_until_enough_trials_are_measured() {
        let mut m = MemoryModel::new(&space(), 6 << 30);
        let e = m.estimate(&params(64, 1, 1e-3));
        assert_eq!(e.bytes, ((6u64 << 30) as f64 * PRIOR_MARGIN).ceil() as u64);
        assert!(e.why.contains("trial_memory"), "{}", e.why);
        m.record(&params(2048, 16, 1e-3), 10 << 30);
        let e = m.estimate(&params(64, 1, 1e-3));
        assert!(e.why.contains("largest peak measured"), "{}", e.why);
        assert!(e.bytes > 10 << 30);
        assert_eq!(
            MemoryModel::new(&space(), 0).expected(&params(64, 1, 1e-3)),
            0
        );
    }

    #[test]
    fn an_oom_raises_the_estimate_near_the_failed_params_only() {
        let mut m = MemoryModel::new(&space(), 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        for _ in 0..30 {
            let (w, d) = (rng.gen_range(64..=2048), rng.gen_range(1..=16));
            m.record(&params(w, d, 1e-3), peak(w, d));
        }
        let before_near = m.expected(&params(1024, 8, 1e-2));
        let before_far = m.expected(&params(128, 2, 1e-2));
        m.record_oom(&params(1024, 8, 1e-4), 20 << 30, 24 << 30);
        // Same sizes, another learning rate: near in what drives memory.
        let after_near = m.estimate(&params(1024, 8, 1e-2));
        assert!(after_near.bytes >= 24 << 30, "{}", after_near.why);
        assert!(after_near.bytes > before_near);
        assert!(
            after_near.why.contains("out-of-memory"),
            "{}",
            after_near.why
        );
        // With 30 trials measured the fit has the products of width and depth: "near" is
        // measured with them too.
        assert!(
            after_near.why.contains("with products of them"),
            "{}",
            after_near.why
        );
        assert_eq!(
            m.expected(&params(128, 2, 1e-2)),
            before_far,
            "far away: unchanged"
        );
    }

    #[test]
    fn params_a_trial_does_not_have_are_a_feature_of_their_own() {
        let mut m = MemoryModel::new(&SearchSpace::default(), 0);
        let width = Distribution::Int {
            low: 64,
            high: 2048,
            step: 1,
            log: false,
        };
        m.param("width", &width);
        let only = |w: i64| -> Params { [("width".to_owned(), ParamValue::Int(w))].into() };
        for w in [64, 128, 256, 512, 1024, 2048] {
            m.record(&only(w), peak(w, 4));
        }
        // A new param appears (another branch of a define-by-run space).
        let heads = Distribution::Int {
            low: 1,
            high: 16,
            step: 1,
            log: false,
        };
        m.param("heads", &heads);
        let e = m.expected(&only(1024));
        assert!(
            e >= peak(1024, 4),
            "{} < {}",
            fmt_gib(e),
            fmt_gib(peak(1024, 4))
        );
    }

    #[test]
    fn cholesky_solves_a_small_system() {
        let mut a = vec![4.0, 2.0, 2.0, 3.0];
        let x = cholesky_solve(&mut a, &[2.0, 3.0], 2);
        assert!(
            (x[0] - 0.0).abs() < 1e-12 && (x[1] - 1.0).abs() < 1e-12,
            "{x:?}"
        );
    }
}
