//! Tree-structured Parzen Estimator, after Optuna 5.0's `TPESampler` (single objective).
//!
//! References: Watanabe 2023, "Tree-structured Parzen Estimator: Understanding Its Algorithm
//! Components and Their Roles for Better Empirical Performance", and Optuna 5.0's
//! `samplers/_tpe/{sampler,parzen_estimator,probability_distributions,_truncnorm}.py`. The
//! tests check the Parzen estimator's log density against Optuna 5.0's to 1e-9, and the
//! optimisation scenarios against Optuna 5.0 run on the same problems.
//!
//! Components, with Optuna 5.0's defaults:
//! - **startup**: until `n_startup_trials` trials are COMPLETE or PRUNED, proposals come from
//!   [`RandomSampler`] with the same seed, so they are exactly the random sampler's proposals.
//! - **split**: `gamma(n) = min(ceil(0.1 n), 25)` trials go "below" (good), the rest "above",
//!   where `n` counts COMPLETE and PRUNED trials. Below is filled in this order: feasible COMPLETE
//!   trials by objective (negated when maximizing), then feasible PRUNED trials by their last
//!   intermediate value (those pruned without one last), then infeasible trials by total
//!   violation. Both groups are then put in trial-number order.
//! - **weights**: `default_weights(n)`: ones for `n < 25`, else `linspace(1/n, 1, n - 25)` for the
//!   oldest trials and ones for the newest 25; the prior kernel gets `prior_weight = 1`.
//! - **Parzen estimators** `l(x)` (below) and `g(x)` (above): a mixture of one kernel per trial
//!   plus a prior kernel. Numerical params: truncated normals on the domain (in log space for
//!   log params), prior `mu` = domain centre, `sigma` = domain width. Bandwidth of a trial's
//!   kernel: the distance to its farther neighbour among the observations, the domain ends
//!   counting as neighbours except for the outermost observations, which only look inwards
//!   (`consider_endpoints = false`), then the magic clip to `[width / min(100, n + 2), width]`.
//!   Optuna 5.0 uses this rule in multivariate mode too: its older Scott-like multivariate
//!   bandwidth `0.2 n^(-1/(d+4)) * width` is gone (the estimator's `multivariate` field is
//!   "unused"), and so it is here. Params with a step (all ints, floats with `step`): the
//!   domain is widened by half a step each side, a value's likelihood is the kernel's mass
//!   over its grid cell `[x - step/2, x + step/2]`, and draws are rounded to the grid.
//!   Categorical params: a trial's kernel is its choice's one-hot plus `prior_weight / (n + 1)`
//!   on every choice, normalised; the prior kernel is uniform.
//! - **acquisition**: draw `n_ei_candidates` from `l`, keep the first maximising
//!   `log l(x) - log g(x)`.
//! - **multivariate** (default): one joint estimator over all free params (kernels are products
//!   over params, a draw picks one kernel for all of them); otherwise one estimator per param.
//!   Trials lacking a param (or holding a value outside its domain) are left out of that
//!   param's estimator, and out of the joint one. Params with a single legal value are not
//!   modelled, as Optuna leaves them out of the relative search space.
//! - **constant liar** (default): trials that were `observe`d and not yet `tell`ed (RUNNING or
//!   WAITING) go "above" without counting in `n`, so concurrent proposals avoid each other;
//!   the trial being proposed for (`seed_key`) is left out, as Optuna leaves out the current one.
//! - **constraints**: a trial with any constraint value > 0 is infeasible and ranks after every
//!   feasible trial, by total violation, so it lands "above" unless too few trials are
//!   feasible; its objective value is never used. No constraint values = feasible (as Optuna
//!   5.0's `trial.constraints`).
//! - the truncated normal: `log_ndtr` with an asymptotic series in the far left tail, the log
//!   mass of an interval computed in the left tail by symmetry, and inverse-CDF draws solved by
//!   Newton's method on `log_ndtr` from Optuna's initial guesses, as `_truncnorm.py`.
//!
//! Deliberate differences from Optuna:
//! - FAIL trials with a violated constraint (e.g. out of memory even alone on the device) are
//!   kept as infeasible trials so that their region is avoided; they do not count in `n` nor
//!   towards the startup. Other FAIL trials are ignored, as in Optuna (which ignores them all).
//! - PRUNED trials are ranked by their last intermediate value only: the record does not carry
//!   its step (Optuna ranks pruned trials that got further first).
//! - A COMPLETE value of NaN ranks as the worst (Optuna would have failed the trial).
//! - Fixed params (an enqueued trial's) are kept and not modelled; the free ones are drawn from
//!   the joint estimator of the free params only, not conditioned on the fixed values.
//! - Params whose distribution differs from the one the sampler was built with (the config
//!   changed), and distributions no sampler can draw from, go to the random sampler. A float
//!   with both `step` and `log` (which Optuna forbids) is modelled on the linear grid, as
//!   [`RandomSampler`] draws it; a log int with a step above 1 (also forbidden) keeps its first
//!   grid cell's lower edge at `low - min(step, low) / 2 > 0`.
//! - Ties between equal observations in the bandwidth rule are broken by trial order; Optuna
//!   leaves them to NumPy's unstable `argsort`, so which of the tied kernels gets which width
//!   is arbitrary there.
//! - Randomness is the ChaCha8 stream of (seed, trial number), not NumPy's `RandomState`, so a
//!   seeded proposal differs from Optuna's while being reproducible whatever the dispatch order.
//! - Bounded cost: past [`HISTORY_WINDOW`] finished trials, "below" is still the best
//!   `gamma(n)` of *all* trials (read off a set kept in rank order as trials are told), but
//!   "above" keeps only the `HISTORY_WINDOW` most recently told of the rest. Optuna re-fits every trial on every ask, so its
//!   cost grows with the study; here a proposal's cost stops growing. Optuna's fading weights
//!   already give the oldest trials the least weight, so the window drops what matters least.

use crate::sampler::{RandomSampler, Sampler};
use crate::study::{
    Direction, Distribution, ParamValue, Params, SearchSpace, TrialRecord, TrialState,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap};

/// Weight of the prior kernel in every Parzen estimator (Optuna's `prior_weight`).
const PRIOR_WEIGHT: f64 = 1.0;

/// Past this many finished trials, "above" keeps only the newest this many (see the module
/// docs): a proposal then costs the same at 100,000 trials as at 1,000.
pub const HISTORY_WINDOW: usize = 1000;

/// TPE options; [`Default`] gives Optuna's defaults with sweepd's choice of multivariate and
/// constant liar.
#[derive(Debug, Clone)]
pub struct TpeSettings {
    /// Random proposals until this many trials are COMPLETE or PRUNED.
    pub n_startup_trials: usize,
    /// Draws from `l(x)` scored per proposal.
    pub n_ei_candidates: usize,
    /// One joint estimator over all params rather than one per param.
    pub multivariate: bool,
    /// Running trials count as bad ("above") so parallel proposals spread out.
    pub constant_liar: bool,
    pub seed: Option<u64>,
}

impl Default for TpeSettings {
    fn default() -> Self {
        TpeSettings {
            n_startup_trials: 10,
            n_ei_candidates: 24,
            multivariate: true,
            constant_liar: true,
            seed: None,
        }
    }
}

/// The TPE sampler. History is kept here, one compact row of model coordinates per trial.
pub struct TpeSampler {
    direction: Direction,
    settings: TpeSettings,
    /// The space the sampler was built for; `models` and every history row follow its order.
    space: SearchSpace,
    models: Vec<Model>,
    index: HashMap<String, usize>,
    finished: Vec<Finished>,
    /// How many of `finished` count in `n` (kept, not recounted on every proposal).
    counted: usize,
    /// Every finished trial in split order, kept as trials are told, so a long history's best
    /// are read off its first entries instead of re-ranking the study for every proposal.
    ranked: std::collections::BTreeSet<RankKey>,
    /// Trial number -> index into `finished`.
    finished_at: HashMap<i64, usize>,
    /// Observed, not yet finished: the constant liar's trials.
    running: BTreeMap<i64, Box<[f64]>>,
    /// Startup proposals, and params the estimators cannot model.
    random: RandomSampler,
    /// Used only when unseeded.
    entropy: ChaCha8Rng,
}

/// A finished trial's place in the split order: complete by loss, then pruned by last value
/// (those without one last), then infeasible by violation; ties by trial number.
#[derive(Debug, Clone, Copy)]
struct RankKey {
    class: u8,
    missing: bool,
    key: f64,
    number: i64,
}

impl RankKey {
    fn of(f: &Finished) -> RankKey {
        let (class, missing, key) = match f.rank {
            Rank::Complete(loss) => (0, false, loss),
            Rank::Pruned(l) => (1, l.is_none(), l.unwrap_or(0.0)),
            Rank::Infeasible { violation, .. } => (2, false, violation),
        };
        RankKey {
            class,
            missing,
            key,
            number: f.number,
        }
    }
}

impl Ord for RankKey {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.class
            .cmp(&o.class)
            .then(self.missing.cmp(&o.missing))
            .then(self.key.total_cmp(&o.key))
            .then(self.number.cmp(&o.number))
    }
}

impl PartialOrd for RankKey {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for RankKey {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}

impl Eq for RankKey {}

/// A finished trial as the split needs it.
struct Finished {
    number: i64,
    /// Model coordinate per param of `space` (NaN when missing or out of domain).
    coords: Box<[f64]>,
    rank: Rank,
}

#[derive(Debug, Clone, Copy)]
enum Rank {
    /// Feasible COMPLETE: the objective as a loss (negated when maximizing, NaN as +inf).
    Complete(f64),
    /// Feasible PRUNED: the last intermediate value as a loss; `None` = pruned without one.
    Pruned(Option<f64>),
    /// Some constraint > 0. `counted`: COMPLETE or PRUNED (counts in `n` and the startup).
    Infeasible { violation: f64, counted: bool },
}

/// How one param is modelled.
#[derive(Debug, Clone)]
enum Model {
    /// Only one legal value: proposed as is.
    Single(ParamValue),
    /// A distribution no sampler can draw from; left to the random sampler (which refuses it).
    Invalid,
    Numeric(Numeric),
    Categorical {
        n: usize,
    },
}

/// A float or int param. Kernels live in model space: the value, or its log for log params.
#[derive(Debug, Clone, Copy)]
struct Numeric {
    /// Kernel domain in model space.
    lo: f64,
    hi: f64,
    log: bool,
    /// Raw bounds of a continuous param, to clamp draws against rounding in `exp`.
    low: f64,
    high: f64,
    grid: Option<Grid>,
}

/// The legal values `low + k * step`, `k = 0..=last`, of a stepped param.
#[derive(Debug, Clone, Copy)]
struct Grid {
    low: f64,
    step: f64,
    last: u64,
    /// Raw edges of the first and last cells.
    edge_lo: f64,
    edge_hi: f64,
    /// `Some((low, step))` for an int param.
    int: Option<(i64, i64)>,
    /// A float grid's `high`, which the last point must not pass.
    high: f64,
}

impl Model {
    fn new(dist: &Distribution) -> Model {
        match *dist {
            Distribution::Float {
                low,
                high,
                step,
                log,
            } => {
                if !low.is_finite() || !high.is_finite() || low > high {
                    return Model::Invalid;
                }
                match step {
                    Some(s) => {
                        if !s.is_finite() || s <= 0.0 || (high - low) / s > 1e15 {
                            return Model::Invalid;
                        }
                        let last = last_step(low, high, s);
                        if last == 0 {
                            return Model::Single(ParamValue::Float(low));
                        }
                        let grid = Grid {
                            low,
                            step: s,
                            last,
                            edge_lo: low - s / 2.0,
                            edge_hi: low + s * last as f64 + s / 2.0,
                            int: None,
                            high,
                        };
                        Model::Numeric(Numeric {
                            lo: grid.edge_lo,
                            hi: grid.edge_hi,
                            log: false,
                            low,
                            high,
                            grid: Some(grid),
                        })
                    }
                    None => {
                        if log && low <= 0.0 {
                            return Model::Invalid;
                        }
                        if low == high {
                            return Model::Single(ParamValue::Float(low));
                        }
                        let (lo, hi) = if log {
                            (low.ln(), high.ln())
                        } else {
                            (low, high)
                        };
                        Model::Numeric(Numeric {
                            lo,
                            hi,
                            log,
                            low,
                            high,
                            grid: None,
                        })
                    }
                }
            }
            Distribution::Int {
                low,
                high,
                step,
                log,
            } => {
                if low > high || step <= 0 || (log && low < 1) {
                    return Model::Invalid;
                }
                let last = ((high as i128 - low as i128) / step as i128) as u64;
                if last == 0 {
                    return Model::Single(ParamValue::Int(low));
                }
                let (lowf, stepf) = (low as f64, step as f64);
                let top = lowf + stepf * last as f64;
                // Optuna's log ints have step 1, where the first cell starts at low - 0.5;
                // a wider step must not take the cell's edge to zero or below.
                let half_lo = if log {
                    stepf.min(lowf) / 2.0
                } else {
                    stepf / 2.0
                };
                let grid = Grid {
                    low: lowf,
                    step: stepf,
                    last,
                    edge_lo: lowf - half_lo,
                    edge_hi: top + stepf / 2.0,
                    int: Some((low, step)),
                    high: top,
                };
                let to = |x: f64| if log { x.ln() } else { x };
                Model::Numeric(Numeric {
                    lo: to(grid.edge_lo),
                    hi: to(grid.edge_hi),
                    log,
                    low: lowf,
                    high: top,
                    grid: Some(grid),
                })
            }
            Distribution::Categorical { ref choices } => match choices.len() {
                0 => Model::Invalid,
                1 => Model::Single(ParamValue::Choice(0)),
                n => Model::Categorical { n },
            },
        }
    }

    /// The coordinate the estimators use for `v`: NaN if `v` does not fit this param.
    fn coord(&self, v: &ParamValue) -> f64 {
        match (self, v) {
            (Model::Numeric(m), ParamValue::Float(x)) if m.grid.is_none_or(|g| g.int.is_none()) => {
                m.coord(*x)
            }
            (Model::Numeric(m), ParamValue::Int(i)) if m.grid.is_some_and(|g| g.int.is_some()) => {
                m.coord(*i as f64)
            }
            (Model::Categorical { n }, ParamValue::Choice(c)) if c < n => *c as f64,
            _ => f64::NAN,
        }
    }
}

impl Numeric {
    fn model_of(&self, raw: f64) -> f64 {
        if self.log {
            raw.ln()
        } else {
            raw
        }
    }

    fn coord(&self, x: f64) -> f64 {
        if !x.is_finite() {
            return f64::NAN;
        }
        match self.grid {
            Some(g) => {
                let k = ((x - g.low) / g.step).round();
                if k < -1e-9 || k > g.last as f64 + 1e-9 {
                    return f64::NAN;
                }
                self.model_of(g.raw(k as u64))
            }
            None if x >= self.low && x <= self.high => self.model_of(x),
            None => f64::NAN,
        }
    }

    /// A draw in model space, as a candidate: the model coordinate, or the grid index.
    fn candidate(&self, x: f64) -> f64 {
        match self.grid {
            Some(g) => {
                let raw = if self.log { x.exp() } else { x };
                let k = ((raw - g.low) / g.step).round();
                k.clamp(0.0, g.last as f64)
            }
            None => x.clamp(self.lo, self.hi),
        }
    }

    /// The cell `[left, right]` (model space) of the grid point a candidate names.
    fn cell(&self, g: &Grid, k: u64) -> (f64, f64) {
        let v = g.raw(k);
        let left = (v - g.step / 2.0).max(g.edge_lo);
        let right = (v + g.step / 2.0).min(g.edge_hi);
        (self.model_of(left), self.model_of(right))
    }

    fn value(&self, cand: f64) -> ParamValue {
        match self.grid {
            Some(g) => {
                let k = cand as u64;
                match g.int {
                    Some((low, step)) => {
                        ParamValue::Int((low as i128 + step as i128 * k as i128) as i64)
                    }
                    None => ParamValue::Float(g.raw(k)),
                }
            }
            None => {
                let raw = if self.log { cand.exp() } else { cand };
                ParamValue::Float(raw.clamp(self.low, self.high))
            }
        }
    }
}

impl Grid {
    fn raw(&self, k: u64) -> f64 {
        match self.int {
            Some((low, step)) => (low as i128 + step as i128 * k as i128) as f64,
            // low + step * k can overshoot high by an ulp.
            None => (self.low + self.step * k as f64).min(self.high),
        }
    }
}

/// The index of the last point of the float grid `low + step * k` that does not pass `high`
/// (as the random sampler, which lowers an off-grid `high` to the grid like Optuna).
fn last_step(low: f64, high: f64, step: f64) -> u64 {
    let span = (high - low) / step;
    let mut n = span.round();
    if n > span + 1e-8 {
        n -= 1.0;
    }
    n.max(0.0) as u64
}

/// Optuna's `default_gamma`: how many trials go below.
fn default_gamma(n: usize) -> usize {
    ((0.1 * n as f64).ceil() as usize).min(25)
}

/// Optuna's `default_weights`: older trials fade once there are more than 25.
fn default_weights(n: usize) -> Vec<f64> {
    if n < 25 {
        return vec![1.0; n];
    }
    let ramp = n - 25;
    let start = 1.0 / n as f64;
    let mut w: Vec<f64> = match ramp {
        0 => Vec::new(),
        1 => vec![start],
        _ => {
            let step = (1.0 - start) / (ramp - 1) as f64;
            let mut v: Vec<f64> = (0..ramp).map(|i| start + step * i as f64).collect();
            v[ramp - 1] = 1.0;
            v
        }
    };
    w.resize(n, 1.0);
    w
}

impl TpeSampler {
    pub fn new(space: &SearchSpace, direction: Direction, settings: TpeSettings) -> TpeSampler {
        let models = space.params.iter().map(|p| Model::new(&p.dist)).collect();
        let index = space
            .params
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.clone(), i))
            .collect();
        TpeSampler {
            direction,
            random: RandomSampler::new(settings.seed),
            settings,
            space: space.clone(),
            models,
            index,
            finished: Vec::new(),
            counted: 0,
            ranked: Default::default(),
            finished_at: HashMap::new(),
            running: BTreeMap::new(),
            entropy: ChaCha8Rng::from_entropy(),
        }
    }

    fn coords(&self, params: &Params) -> Box<[f64]> {
        self.space
            .params
            .iter()
            .zip(&self.models)
            .map(|(p, m)| params.get(&p.name).map_or(f64::NAN, |v| m.coord(v)))
            .collect()
    }

    fn loss(&self, value: f64) -> f64 {
        let l = match self.direction {
            Direction::Minimize => value,
            Direction::Maximize => -value,
        };
        if l.is_nan() {
            f64::INFINITY
        } else {
            l
        }
    }

    /// Trials that count in `n` (COMPLETE or PRUNED, feasible or not).
    fn n_counted(&self) -> usize {
        self.counted
    }

    fn counts(f: &Finished) -> bool {
        !matches!(f.rank, Rank::Infeasible { counted: false, .. })
    }

    fn forget(&mut self, number: i64) {
        if let Some(i) = self.finished_at.remove(&number) {
            if Self::counts(&self.finished[i]) {
                self.counted -= 1;
            }
            self.ranked.remove(&RankKey::of(&self.finished[i]));
            self.finished.swap_remove(i);
            if let Some(moved) = self.finished.get(i) {
                self.finished_at.insert(moved.number, i);
            }
        }
    }

    /// Optuna's `_split_trials`: history rows below and above, each in trial-number order.
    /// `current`: the trial the proposal is for, left out of the running ones as in Optuna.
    fn split(&self, current: Option<i64>) -> (Vec<&[f64]>, Vec<&[f64]>) {
        if self.finished.len() > HISTORY_WINDOW {
            return self.split_windowed(current);
        }
        let mut complete = Vec::new();
        let mut pruned = Vec::new();
        let mut infeasible = Vec::new();
        for f in &self.finished {
            match f.rank {
                Rank::Complete(loss) => complete.push((f, loss)),
                Rank::Pruned(loss) => pruned.push((f, loss)),
                Rank::Infeasible { violation, .. } => infeasible.push((f, violation)),
            }
        }
        let mut n_below = default_gamma(self.n_counted());
        let by_number = |a: &Finished, b: &Finished| a.number.cmp(&b.number);
        complete.sort_by(|a, b| a.1.total_cmp(&b.1).then(by_number(a.0, b.0)));
        // Pruned without an intermediate value rank last, as Optuna's score (1, 0.0).
        let pruned_key = |l: Option<f64>| (l.is_none(), l.unwrap_or(0.0));
        pruned.sort_by(|a, b| {
            let (ka, kb) = (pruned_key(a.1), pruned_key(b.1));
            ka.0.cmp(&kb.0)
                .then(ka.1.total_cmp(&kb.1))
                .then(by_number(a.0, b.0))
        });
        infeasible.sort_by(|a, b| a.1.total_cmp(&b.1).then(by_number(a.0, b.0)));

        let mut below: Vec<(i64, &[f64])> = Vec::new();
        let mut above: Vec<(i64, &[f64])> = Vec::new();
        let ranked = complete
            .iter()
            .map(|(f, _)| *f)
            .chain(pruned.iter().map(|(f, _)| *f))
            .chain(infeasible.iter().map(|(f, _)| *f));
        for f in ranked {
            if n_below > 0 {
                below.push((f.number, &f.coords));
                n_below -= 1;
            } else {
                above.push((f.number, &f.coords));
            }
        }
        self.finish_split(below, above, current)
    }

    /// The split's last step, shared by both ways of ranking: the constant liar's running
    /// trials join "above", and both groups go in trial-number order.
    fn finish_split<'a>(
        &'a self,
        mut below: Vec<(i64, &'a [f64])>,
        mut above: Vec<(i64, &'a [f64])>,
        current: Option<i64>,
    ) -> (Vec<&'a [f64]>, Vec<&'a [f64]>) {
        if self.settings.constant_liar {
            above.extend(
                self.running
                    .iter()
                    .filter(|(n, _)| Some(**n) != current)
                    .map(|(n, c)| (*n, &c[..])),
            );
        }
        below.sort_by_key(|r| r.0);
        above.sort_by_key(|r| r.0);
        (
            below.into_iter().map(|r| r.1).collect(),
            above.into_iter().map(|r| r.1).collect(),
        )
    }

    /// The split of a long history in linear time: the best `gamma(n)` of all trials go below
    /// (selection, in the same rank order as [`Self::split`]), the newest `HISTORY_WINDOW` of
    /// the rest above.
    fn split_windowed(&self, current: Option<i64>) -> (Vec<&[f64]>, Vec<&[f64]>) {
        let n_below = default_gamma(self.n_counted()).min(self.finished.len());
        // `ranked` keeps every finished trial in split order: the best are its first entries.
        let best: std::collections::HashSet<i64> =
            self.ranked.iter().take(n_below).map(|k| k.number).collect();
        let row = |number: i64| {
            let f = &self.finished[self.finished_at[&number]];
            (f.number, &f.coords[..])
        };
        let below: Vec<(i64, &[f64])> = best.iter().map(|n| row(*n)).collect();
        // The newest told trials of the rest (`finished` is in the order trials were told).
        let above: Vec<(i64, &[f64])> = self
            .finished
            .iter()
            .rev()
            .filter(|f| !best.contains(&f.number))
            .take(HISTORY_WINDOW)
            .map(|f| (f.number, &f.coords[..]))
            .collect();
        self.finish_split(below, above, current)
    }

    /// One TPE proposal for the params `dims` (indices into `space`) jointly.
    fn propose(
        &self,
        dims: &[usize],
        below: &[&[f64]],
        above: &[&[f64]],
        rng: &mut ChaCha8Rng,
    ) -> Vec<ParamValue> {
        let models: Vec<&Model> = dims.iter().map(|&i| &self.models[i]).collect();
        let l = Estimator::new(&models, dims, below);
        let g = Estimator::new(&models, dims, above);
        let n_cand = self.settings.n_ei_candidates.max(1);
        let cands = l.sample(rng, n_cand);
        let ll = l.log_pdf(&cands);
        let lg = g.log_pdf(&cands);
        let mut best = 0;
        let mut best_score = f64::NEG_INFINITY;
        for c in 0..n_cand {
            let score = ll[c] - lg[c];
            // First maximum wins, as np.argmax; NaN never does.
            if score > best_score || (c == 0 && !score.is_nan()) {
                best = c;
                best_score = score;
            }
        }
        let d = dims.len();
        models
            .iter()
            .zip(&cands[best * d..(best + 1) * d])
            .map(|(m, &x)| match m {
                Model::Numeric(num) => num.value(x),
                Model::Categorical { .. } => ParamValue::Choice(x as usize),
                _ => unreachable!("only modelled params are proposed"),
            })
            .collect()
    }
}

impl Sampler for TpeSampler {
    fn sample(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Params> {
        if self.n_counted() < self.settings.n_startup_trials {
            return self.random.sample(space, fixed, seed_key);
        }
        let mut rng = match self.settings.seed {
            Some(seed) => {
                let mut r = ChaCha8Rng::seed_from_u64(seed);
                r.set_stream(seed_key);
                r
            }
            None => ChaCha8Rng::seed_from_u64(self.entropy.gen()),
        };
        let mut out = fixed.clone();
        let mut free = Vec::new();
        for p in &space.params {
            if out.contains_key(&p.name) {
                continue;
            }
            let Some(&i) = self.index.get(&p.name) else {
                continue;
            };
            if self.space.params[i].dist != p.dist {
                continue;
            }
            match &self.models[i] {
                Model::Single(v) => {
                    out.insert(p.name.clone(), v.clone());
                }
                Model::Invalid => {}
                Model::Numeric(_) | Model::Categorical { .. } => free.push(i),
            }
        }
        if !free.is_empty() {
            let (below, above) = self.split(i64::try_from(seed_key).ok());
            let groups: Vec<Vec<usize>> = if self.settings.multivariate {
                vec![free]
            } else {
                free.into_iter().map(|i| vec![i]).collect()
            };
            for dims in groups {
                let values = self.propose(&dims, &below, &above, &mut rng);
                for (i, v) in dims.into_iter().zip(values) {
                    out.insert(self.space.params[i].name.clone(), v);
                }
            }
        }
        if space.params.iter().any(|p| !out.contains_key(&p.name)) {
            // Params the sampler was not built for: drawn at random.
            return self.random.sample(space, &out, seed_key);
        }
        Some(out)
    }

    fn observe(&mut self, number: i64, params: &Params) {
        if self.finished_at.contains_key(&number) {
            return;
        }
        let coords = self.coords(params);
        self.running.insert(number, coords);
    }

    fn tell(&mut self, record: &TrialRecord) {
        let number = record.number;
        if matches!(record.state, TrialState::Running | TrialState::Waiting) {
            self.forget(number);
            self.observe(number, &record.params);
            return;
        }
        self.running.remove(&number);
        // Optuna: a trial is feasible iff every constraint is <= 0 (NaN counts as feasible).
        let violation: f64 = record.constraints.iter().filter(|&&c| c > 0.0).sum();
        let counted = matches!(record.state, TrialState::Complete | TrialState::Pruned);
        let rank = if violation > 0.0 {
            Some(Rank::Infeasible { violation, counted })
        } else {
            match record.state {
                TrialState::Complete => record.value.map(|v| Rank::Complete(self.loss(v))),
                TrialState::Pruned => Some(Rank::Pruned(record.value.map(|v| self.loss(v)))),
                _ => None,
            }
        };
        self.forget(number);
        if let Some(rank) = rank {
            let coords = self.coords(&record.params);
            self.finished_at.insert(number, self.finished.len());
            let f = Finished {
                number,
                coords,
                rank,
            };
            if Self::counts(&f) {
                self.counted += 1;
            }
            self.ranked.insert(RankKey::of(&f));
            self.finished.push(f);
        }
    }
}

/// A Parzen estimator: a mixture of product kernels, the last one the prior.
struct Estimator {
    log_weights: Vec<f64>,
    dims: Vec<DimKernels>,
}

enum DimKernels {
    Numeric {
        model: Numeric,
        /// Per kernel: index into the distinct (mu, sigma) pairs below.
        pair: Vec<u32>,
        mu: Vec<f64>,
        sigma: Vec<f64>,
        /// Log mass of the domain under each pair's normal.
        log_norm: Vec<f64>,
    },
    Categorical {
        n: usize,
        /// Per observation kernel, its choice (the prior kernel, last, is uniform).
        obs: Vec<usize>,
        /// Unnormalised mass on every choice (the observed one gets 1 more).
        base: f64,
        /// Log probability of the observed choice and of any other under an observation kernel.
        hit: f64,
        miss: f64,
    },
}

impl Estimator {
    /// `rows`: history rows in trial-number order; those lacking one of `dims` are skipped.
    fn new(models: &[&Model], dims: &[usize], rows: &[&[f64]]) -> Estimator {
        let kept: Vec<&[f64]> = rows
            .iter()
            .copied()
            .filter(|r| dims.iter().all(|&i| !r[i].is_nan()))
            .collect();
        let n = kept.len();
        let mut weights = default_weights(n);
        weights.push(PRIOR_WEIGHT);
        if n == 0 {
            weights = vec![1.0];
        }
        let total: f64 = weights.iter().sum();
        let log_weights = weights.iter().map(|w| (w / total).ln()).collect();
        let n_kernels = n + 1;
        let dims = models
            .iter()
            .zip(dims)
            .map(|(m, &i)| {
                let obs = kept.iter().map(|r| r[i]);
                match m {
                    Model::Numeric(num) => {
                        let mus: Vec<f64> = obs.collect();
                        let mut sigmas = bandwidths(&mus, num.lo, num.hi);
                        let mut mus = mus;
                        mus.push(0.5 * (num.lo + num.hi));
                        sigmas.push(num.hi - num.lo);
                        numeric_kernels(*num, &mus, &sigmas)
                    }
                    Model::Categorical { n: n_choices } => {
                        let base = PRIOR_WEIGHT / n_kernels as f64;
                        let row_sum = *n_choices as f64 * base + 1.0;
                        DimKernels::Categorical {
                            n: *n_choices,
                            obs: obs.map(|x| x as usize).collect(),
                            base,
                            hit: ((base + 1.0) / row_sum).ln(),
                            miss: (base / row_sum).ln(),
                        }
                    }
                    _ => unreachable!("only modelled params get kernels"),
                }
            })
            .collect();
        Estimator { log_weights, dims }
    }

    /// `count` draws, flat: `count` rows of one candidate value per dim (a model coordinate,
    /// a grid index or a choice index).
    fn sample(&self, rng: &mut ChaCha8Rng, count: usize) -> Vec<f64> {
        let nk = self.log_weights.len();
        let mut cumulative = Vec::with_capacity(nk);
        let mut acc = 0.0;
        for lw in &self.log_weights {
            acc += lw.exp();
            cumulative.push(acc);
        }
        let mut out = Vec::with_capacity(count * self.dims.len());
        for _ in 0..count {
            let u = rng.gen::<f64>() * acc;
            let k = cumulative.partition_point(|&c| c <= u).min(nk - 1);
            for d in &self.dims {
                let x = match d {
                    DimKernels::Numeric {
                        model,
                        pair,
                        mu,
                        sigma,
                        ..
                    } => {
                        let p = pair[k] as usize;
                        let x = truncnorm_draw(mu[p], sigma[p], model.lo, model.hi, rng);
                        model.candidate(x)
                    }
                    DimKernels::Categorical { n, obs, base, .. } => match obs.get(k) {
                        // Mass 1 on the observed choice plus `base` on every choice.
                        Some(&o) => {
                            let u = rng.gen::<f64>() * (*n as f64 * base + 1.0);
                            if u < 1.0 {
                                o as f64
                            } else {
                                (((u - 1.0) / base) as usize).min(n - 1) as f64
                            }
                        }
                        None => rng.gen_range(0..*n) as f64,
                    },
                };
                out.push(x);
            }
        }
        out
    }

    /// `log` of the mixture density at each candidate (flat rows as [`Estimator::sample`]).
    fn log_pdf(&self, cands: &[f64]) -> Vec<f64> {
        let nk = self.log_weights.len();
        let nd = self.dims.len();
        let n_cand = cands.len() / nd.max(1);
        let mut acc: Vec<f64> = Vec::with_capacity(n_cand * nk);
        for _ in 0..n_cand {
            acc.extend_from_slice(&self.log_weights);
        }
        for (d, dim) in self.dims.iter().enumerate() {
            match dim {
                DimKernels::Numeric {
                    model,
                    pair,
                    mu,
                    sigma,
                    log_norm,
                } => match model.grid {
                    None => {
                        // Per pair: the constant part of the truncated normal's log density.
                        let consts: Vec<f64> = (0..mu.len())
                            .map(|p| -LOG_SQRT_2PI - log_norm[p] - sigma[p].ln())
                            .collect();
                        let inv: Vec<f64> = sigma.iter().map(|s| 1.0 / s).collect();
                        for c in 0..n_cand {
                            let x = cands[c * nd + d];
                            let row = &mut acc[c * nk..(c + 1) * nk];
                            for (j, a) in row.iter_mut().enumerate() {
                                let p = pair[j] as usize;
                                let z = (x - mu[p]) * inv[p];
                                *a += consts[p] - 0.5 * z * z;
                            }
                        }
                    }
                    Some(g) => {
                        // The cell mass per distinct (grid point, kernel pair).
                        let mut points: Vec<u64> =
                            (0..n_cand).map(|c| cands[c * nd + d] as u64).collect();
                        points.sort_unstable();
                        points.dedup();
                        let mut table = vec![0.0; points.len() * mu.len()];
                        for (u, &k) in points.iter().enumerate() {
                            let (left, right) = model.cell(&g, k);
                            for p in 0..mu.len() {
                                let a = (left - mu[p]) / sigma[p];
                                let b = (right - mu[p]) / sigma[p];
                                table[u * mu.len() + p] = log_gauss_mass(a, b) - log_norm[p];
                            }
                        }
                        for c in 0..n_cand {
                            let k = cands[c * nd + d] as u64;
                            let u = points.binary_search(&k).expect("point was tabled");
                            let t = &table[u * mu.len()..(u + 1) * mu.len()];
                            let row = &mut acc[c * nk..(c + 1) * nk];
                            for (j, a) in row.iter_mut().enumerate() {
                                *a += t[pair[j] as usize];
                            }
                        }
                    }
                },
                DimKernels::Categorical {
                    n, obs, hit, miss, ..
                } => {
                    let prior = -(*n as f64).ln();
                    for c in 0..n_cand {
                        let x = cands[c * nd + d] as usize;
                        let row = &mut acc[c * nk..(c + 1) * nk];
                        for (j, a) in row.iter_mut().enumerate() {
                            *a += match obs.get(j) {
                                Some(&o) if o == x => *hit,
                                Some(_) => *miss,
                                None => prior,
                            };
                        }
                    }
                }
            }
        }
        acc.chunks(nk).map(log_sum_exp).collect()
    }
}

/// Kernels of a numerical param, sharing the work of identical (mu, sigma) pairs.
fn numeric_kernels(model: Numeric, mus: &[f64], sigmas: &[f64]) -> DimKernels {
    let mut seen: HashMap<(u64, u64), u32> = HashMap::new();
    let mut pair = Vec::with_capacity(mus.len());
    let (mut mu, mut sigma, mut log_norm) = (Vec::new(), Vec::new(), Vec::new());
    for (&m, &s) in mus.iter().zip(sigmas) {
        let id = *seen.entry((m.to_bits(), s.to_bits())).or_insert_with(|| {
            mu.push(m);
            sigma.push(s);
            log_norm.push(log_gauss_mass((model.lo - m) / s, (model.hi - m) / s));
            (mu.len() - 1) as u32
        });
        pair.push(id);
    }
    DimKernels::Numeric {
        model,
        pair,
        mu,
        sigma,
        log_norm,
    }
}

/// Kernel widths for observations `mus` on `[lo, hi]` (model space), as Optuna 5.0: the
/// distance to the farther neighbour, the domain ends counting as neighbours except for the
/// outermost points, which only look inwards (consider_endpoints = false); then the magic clip
/// to `[width / min(100, n + 2), width]`.
fn bandwidths(mus: &[f64], lo: f64, hi: f64) -> Vec<f64> {
    let n = mus.len();
    let width = hi - lo;
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| mus[i].total_cmp(&mus[j]));
    let mut s = Vec::with_capacity(n + 2);
    s.push(lo);
    s.extend(order.iter().map(|&i| mus[i]));
    s.push(hi);
    let mut sorted: Vec<f64> = (0..n)
        .map(|i| (s[i + 1] - s[i]).max(s[i + 2] - s[i + 1]))
        .collect();
    if n >= 2 {
        sorted[0] = s[2] - s[1];
        sorted[n - 1] = s[n] - s[n - 1];
    }
    let min_sigma = width / (100.0f64).min(n as f64 + 2.0);
    let mut sigmas = vec![0.0; n];
    for (rank, &i) in order.iter().enumerate() {
        sigmas[i] = sorted[rank].max(min_sigma).min(width);
    }
    sigmas
}

fn log_sum_exp(v: &[f64]) -> f64 {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if max == f64::NEG_INFINITY || max.is_nan() {
        return max;
    }
    max + v.iter().map(|x| (x - max).exp()).sum::<f64>().ln()
}

// ---- The standard normal and its truncation, after Optuna's `_truncnorm.py`. ----

const LOG_SQRT_2PI: f64 = 0.918_938_533_204_672_8;
const SQRT_2: f64 = std::f64::consts::SQRT_2;

/// Standard normal CDF, accurate in both tails.
fn ndtr(a: f64) -> f64 {
    let x = a / SQRT_2;
    if x.abs() < std::f64::consts::FRAC_1_SQRT_2 {
        0.5 + 0.5 * libm::erf(x)
    } else {
        let y = 0.5 * libm::erfc(x.abs());
        if x > 0.0 {
            1.0 - y
        } else {
            y
        }
    }
}

/// `ln(ndtr(a))`, accurate far into the left tail (an asymptotic series below -20).
fn log_ndtr(a: f64) -> f64 {
    if a > 6.0 {
        return (-ndtr(-a)).ln_1p();
    }
    if a > -20.0 {
        return ndtr(a).ln();
    }
    if a == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    // ln(pdf(a) / -a) + ln(1 - 1/a^2 + 3/a^4 - 15/a^6 + ...)
    let log_lhs = -0.5 * a * a - (-a).ln() - LOG_SQRT_2PI;
    let denom = 1.0 / (a * a);
    let (mut total, mut last) = (1.0f64, 0.0f64);
    let (mut numerator, mut factor, mut sign) = (1.0f64, 1.0f64, 1.0f64);
    let mut i = 0.0;
    while (last - total).abs() > f64::EPSILON {
        i += 1.0;
        last = total;
        sign = -sign;
        factor *= denom;
        numerator *= 2.0 * i - 1.0;
        total += sign * numerator * factor;
    }
    log_lhs + total.ln()
}

/// `ln(ndtr(b) - ndtr(a))` for `a <= b`, computed in the left tail by symmetry.
fn log_gauss_mass(a: f64, b: f64) -> f64 {
    if a >= b {
        return f64::NEG_INFINITY;
    }
    let (a, b) = if a > 0.0 { (-b, -a) } else { (a, b) };
    if b <= 0.0 {
        let (la, lb) = (log_ndtr(a), log_ndtr(b));
        lb + (-(la - lb).exp()).ln_1p()
    } else {
        // Central: 1 - left tail - right tail, without cancelling near 1.
        (-ndtr(a) - ndtr(-b)).ln_1p()
    }
}

fn log_add_exp(x: f64, y: f64) -> f64 {
    let (hi, lo) = if x > y { (x, y) } else { (y, x) };
    if hi == f64::NEG_INFINITY {
        return hi;
    }
    hi + (lo - hi).exp().ln_1p()
}

/// The `x` with `log_ndtr(x) = y`: Newton's method from Optuna's initial guesses. `log_ndtr`
/// is concave, so the iterates approach the root from below after the first step.
fn ndtri_exp(y: f64) -> f64 {
    if y.is_nan() {
        return f64::NAN;
    }
    if y >= 0.0 {
        return f64::INFINITY;
    }
    if y == f64::NEG_INFINITY {
        return f64::NEG_INFINITY;
    }
    // Close to 0, solve for -x, whose log_ndtr is ln(1 - exp(y)), and flip back.
    let flipped = y > -1e-2;
    let y = if flipped { (-y.exp_m1()).ln() } else { y };
    if y == f64::NEG_INFINITY {
        return if flipped {
            f64::INFINITY
        } else {
            f64::NEG_INFINITY
        };
    }
    let mut x = if y < -5.0 {
        -(-2.0 * (y + LOG_SQRT_2PI)).sqrt()
    } else {
        // Logistic approximation of the normal CDF.
        -(3.0f64.sqrt() / std::f64::consts::PI) * (-y).exp_m1().ln()
    };
    for _ in 0..100 {
        let l = log_ndtr(x);
        let log_pdf = -0.5 * x * x - LOG_SQRT_2PI;
        let dx = (l - y) * (l - log_pdf).exp();
        x -= dx;
        if !dx.is_finite() || dx.abs() <= 1e-8 * x.abs() {
            break;
        }
    }
    if flipped {
        -x
    } else {
        x
    }
}

/// Quantile `q` of the standard normal truncated to `[a, b]`.
fn truncnorm_ppf(q: f64, a: f64, b: f64) -> f64 {
    if a >= b || q <= 0.0 {
        return a;
    }
    if q >= 1.0 {
        return b;
    }
    let log_mass = log_gauss_mass(a, b);
    let x = if a >= 0.0 {
        -ndtri_exp(log_add_exp(log_ndtr(-b), log_mass + (-q).ln_1p()))
    } else {
        ndtri_exp(log_add_exp(log_ndtr(a), log_mass + q.ln()))
    };
    if x.is_nan() {
        a
    } else {
        x.clamp(a, b)
    }
}

/// A draw from N(mu, sigma) truncated to `[lo, hi]`, by inversion.
fn truncnorm_draw(mu: f64, sigma: f64, lo: f64, hi: f64, rng: &mut ChaCha8Rng) -> f64 {
    let q: f64 = rng.gen();
    let z = truncnorm_ppf(q, (lo - mu) / sigma, (hi - mu) / sigma);
    (mu + sigma * z).clamp(lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::study::space::test_util::{cat, float, int, spec};

    fn seeded(seed: u64) -> TpeSettings {
        TpeSettings {
            seed: Some(seed),
            ..TpeSettings::default()
        }
    }

    fn x_space() -> SearchSpace {
        SearchSpace {
            params: vec![spec("x", float(-10.0, 10.0, None, false))],
        }
    }

    fn f_of(p: &Params, k: &str) -> f64 {
        match p[k] {
            ParamValue::Float(x) => x,
            ParamValue::Int(i) => i as f64,
            ParamValue::Choice(c) => c as f64,
        }
    }

    fn record(number: i64, params: &Params, value: f64, constraints: Vec<f64>) -> TrialRecord {
        TrialRecord {
            number,
            params: params.clone(),
            state: TrialState::Complete,
            value: Some(value),
            constraints,
        }
    }

    /// Sequential trials numbered from `start`: each proposal is observed, evaluated, told.
    fn run(
        s: &mut dyn Sampler,
        space: &SearchSpace,
        start: i64,
        n: i64,
        f: &dyn Fn(&Params) -> (f64, Vec<f64>),
    ) -> Vec<Params> {
        (start..start + n)
            .map(|k| {
                let p = s.sample(space, &Params::new(), k as u64).unwrap();
                s.observe(k, &p);
                let (v, c) = f(&p);
                s.tell(&record(k, &p, v, c));
                p
            })
            .collect()
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    #[test]
    fn normal_numerics_match_reference_values() {
        // ln Phi(a), from mpmath at 50 digits.
        for (a, want) in [
            (-40.0, -804.608_442_013_753_8),
            (-25.0, -316.639_408_008_020_26),
            (-20.0, -203.917_155_371_097_26),
            (-19.5, -194.016_965_777_497_5),
            (-5.0, -15.064_998_393_988_726),
            (-1.0, -1.841_021_645_009_263_5),
            (0.0, -std::f64::consts::LN_2),
            (3.0, -0.001_350_809_964_748_193_8),
            (7.0, -1.279_812_543_886_654e-12),
            (10.0, -7.619_853_024_160_526e-24),
        ] {
            assert!(
                close(log_ndtr(a), want, 1e-13),
                "log_ndtr({a}) = {}",
                log_ndtr(a)
            );
        }
        for (a, b, want) in [
            (-3.0, -2.0, -3.844_353_426_334_205_6),
            (2.0, 3.0, -3.844_353_426_334_205_6),
            (-1.0, 2.0, -0.200_166_294_324_462_6),
            (-50.0, -49.9, -1_249.841_141_866_805_4),
            (30.0, 31.0, -454.321_243_956_343_25),
            (-1e-3, 1e-3, -7.133_546_798_293_52),
            (-8.0, 8.0, -1.244_192_114_854_357_6e-15),
            (5.0, 5.000_001, -27.234_451_591_028_294),
        ] {
            let got = log_gauss_mass(a, b);
            assert!(
                close(got, want, 1e-9),
                "mass({a}, {b}) = {got}, want {want}"
            );
        }
        for (q, a, b, want) in [
            (0.3, -1.0, 1.0, -0.349_219_932_456_882_17),
            (0.9, -2.0, 0.5, 0.317_561_550_998_501_86),
            (0.5, 3.0, 4.0, 3.198_474_131_761_953_5),
            (0.01, -30.0, -29.0, -29.158_180_440_507_61),
            (0.7, -0.1, 60.0, 0.986_481_880_720_073_3),
            (0.999, -5.0, 5.0, 3.090_147_354_261_751_6),
            (0.25, 20.0, 21.0, 20.014_343_291_876_22),
            (0.5, -40.0, -39.9999, -39.999_949_950_000_094),
        ] {
            let got = truncnorm_ppf(q, a, b);
            assert!(
                close(got, want, 1e-7),
                "ppf({q}, {a}, {b}) = {got}, want {want}"
            );
        }
        assert_eq!(truncnorm_ppf(0.0, -1.0, 2.0), -1.0);
        assert_eq!(truncnorm_ppf(0.4, 1.5, 1.5), 1.5);
    }

    #[test]
    fn gamma_and_weights_are_optunas() {
        let g: Vec<usize> = [0, 1, 10, 11, 30, 249, 250, 1000]
            .iter()
            .map(|&n| default_gamma(n))
            .collect();
        assert_eq!(g, [0, 1, 1, 2, 3, 25, 25, 25]);
        assert_eq!(default_weights(0), Vec::<f64>::new());
        assert_eq!(default_weights(24), vec![1.0; 24]);
        assert_eq!(default_weights(25), vec![1.0; 25]);
        let w = default_weights(26);
        assert_eq!(w.len(), 26);
        assert!(close(w[0], 1.0 / 26.0, 1e-15));
        let w = default_weights(35);
        assert!(close(w[0], 1.0 / 35.0, 1e-15));
        assert!(close(w[1], 1.0 / 35.0 + (1.0 - 1.0 / 35.0) / 9.0, 1e-15));
        assert_eq!(&w[9..], &[1.0; 26][..]);
    }

    #[test]
    fn bandwidths_follow_optunas_rules() {
        // Farther neighbour, the outermost points only looking inwards; clipped to
        // [width / min(100, n + 2), width].
        let s = bandwidths(&[0.9, 0.2, 0.5], 0.0, 1.0);
        assert!(close(s[0], 0.4, 1e-12) && close(s[1], 0.3, 1e-12), "{s:?}");
        assert!(close(s[2], 0.4, 1e-12), "{s:?}");
        let s = bandwidths(&[0.5, 0.51, 0.52], 0.0, 1.0);
        assert!(s.iter().all(|&x| close(x, 0.2, 1e-12)), "{s:?}");
        // A single point looks at both domain ends.
        assert_eq!(bandwidths(&[0.2], 0.0, 1.0), [0.8]);
        let many: Vec<f64> = (0..300).map(|i| i as f64 / 300.0).collect();
        assert!(bandwidths(&many, 0.0, 1.0).iter().all(|&x| x == 0.01));
        assert!(bandwidths(&[], 0.0, 1.0).is_empty());
    }

    #[test]
    fn estimator_densities_are_normalised() {
        let space = mixed_space();
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(2));
        run(&mut s, &space, 0, 40, &mixed_objective);
        let (below, above) = s.split(None);
        for (i, m) in s.models.iter().enumerate() {
            {
                for rows in [&below, &above] {
                    if matches!(m, Model::Single(_)) {
                        continue;
                    }
                    let e = Estimator::new(&[m], &[i], rows);
                    let mass = match m {
                        Model::Numeric(num) => match num.grid {
                            Some(g) => {
                                let ks: Vec<f64> = (0..=g.last).map(|k| k as f64).collect();
                                e.log_pdf(&ks).iter().map(|l| l.exp()).sum::<f64>()
                            }
                            None => {
                                // Midpoint rule over the model-space domain.
                                let n = 20000;
                                let h = (num.hi - num.lo) / n as f64;
                                let xs: Vec<f64> =
                                    (0..n).map(|j| num.lo + h * (j as f64 + 0.5)).collect();
                                e.log_pdf(&xs).iter().map(|l| l.exp() * h).sum::<f64>()
                            }
                        },
                        Model::Categorical { n } => {
                            let cs: Vec<f64> = (0..*n).map(|c| c as f64).collect();
                            e.log_pdf(&cs).iter().map(|l| l.exp()).sum::<f64>()
                        }
                        _ => unreachable!(),
                    };
                    let name = &space.params[i].name;
                    assert!((mass - 1.0).abs() < 1e-6, "{name}: mass {mass}");
                }
            }
        }
    }

    #[test]
    fn estimator_draws_follow_its_density() {
        let space = mixed_space();
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(6));
        run(&mut s, &space, 0, 40, &mixed_objective);
        let (below, above) = s.split(None);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let n = 40_000;
        for (i, m) in s.models.iter().enumerate() {
            if !matches!(m, Model::Numeric(_) | Model::Categorical { .. }) {
                continue;
            }
            for rows in [&below, &above] {
                let e = Estimator::new(&[m], &[i], rows);
                // (bin of a draw, probability of each bin)
                let (bin, probs): (Box<dyn Fn(f64) -> usize>, Vec<f64>) = match m {
                    Model::Numeric(num) if num.grid.is_none() => {
                        let (lo, hi) = (num.lo, num.hi);
                        let w = (hi - lo) / 10.0;
                        let probs = (0..10)
                            .map(|b| {
                                let xs: Vec<f64> = (0..400)
                                    .map(|j| lo + w * (b as f64 + (j as f64 + 0.5) / 400.0))
                                    .collect();
                                e.log_pdf(&xs).iter().map(|l| l.exp() * w / 400.0).sum()
                            })
                            .collect();
                        (Box::new(move |x| (((x - lo) / w) as usize).min(9)), probs)
                    }
                    Model::Numeric(Numeric { grid: Some(g), .. }) => {
                        let ks: Vec<f64> = (0..=g.last).map(|k| k as f64).collect();
                        let probs = e.log_pdf(&ks).iter().map(|l| l.exp()).collect();
                        (Box::new(|x| x as usize), probs)
                    }
                    Model::Categorical { n } => {
                        let cs: Vec<f64> = (0..*n).map(|c| c as f64).collect();
                        let probs = e.log_pdf(&cs).iter().map(|l| l.exp()).collect();
                        (Box::new(|x| x as usize), probs)
                    }
                    _ => continue,
                };
                let mut counts = vec![0usize; probs.len()];
                for x in e.sample(&mut rng, n) {
                    counts[bin(x)] += 1;
                }
                for (b, (&c, &p)) in counts.iter().zip(&probs).enumerate() {
                    let freq = c as f64 / n as f64;
                    let tol = 5.0 * (p * (1.0 - p) / n as f64).sqrt() + 1e-4;
                    let name = &space.params[i].name;
                    assert!(
                        (freq - p).abs() < tol,
                        "{name} bin {b}: drawn {freq}, density {p}"
                    );
                }
            }
        }
    }

    /// The scenarios of the tests over 20 seeds, to compare with Optuna 5.0's `TPESampler` run
    /// on the same problems (optuna.samplers.TPESampler(seed=s), same trial counts). Optuna
    /// 5.0 gave, as mean (min to max):
    /// - quadratic, median |x - 3| of the last 20 of 50: 1.86 (1.47 to 2.20), both modes and
    ///   maximize; this port 1.87 (1.59 to 2.21);
    /// - "c1" among 40 post-startup proposals: 23.5 (22 to 25) multivariate, 28.7 (28 to 30)
    ///   independent; this port 23.5 and 29.3;
    /// - log param, median decades from 1e-3: 0.36 (0.27 to 0.47); this port 0.37;
    /// - stepped int at the optimum, last 50 of 110: 25.5; this port 25.3;
    /// - constrained: feasible among the last 20: 11.5 (9 to 14), in [4, 5]: 6.4; this port
    ///   11.5 and 6.3;
    /// - constant liar spread: 6.47 with, 2.14 without; this port 6.39 and 1.85.
    #[test]
    #[ignore]
    fn compare_with_optuna() {
        let n_seeds = 20;
        let mut res: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut add = |k: &str, v: f64| res.entry(k.to_string()).or_default().push(v);
        let cat_space = SearchSpace {
            params: vec![spec("c", cat(4)), spec("x", float(0.0, 1.0, None, false))],
        };
        let fc = |p: &Params| {
            let c = if p["c"] == ParamValue::Choice(1) {
                0.0
            } else {
                1.0
            };
            (c + 0.3 * f_of(p, "x"), vec![])
        };
        for seed in 0..n_seeds {
            for mv in [true, false] {
                let st = TpeSettings {
                    multivariate: mv,
                    ..seeded(seed)
                };
                let mut s = TpeSampler::new(&x_space(), Direction::Minimize, st.clone());
                let ps = run(&mut s, &x_space(), 0, 50, &quadratic);
                add(
                    &format!("quad mv={mv} median|x-3| last20"),
                    median(
                        ps[30..]
                            .iter()
                            .map(|p| (f_of(p, "x") - 3.0).abs())
                            .collect(),
                    ),
                );
                let mut s = TpeSampler::new(&cat_space, Direction::Minimize, st);
                let ps = run(&mut s, &cat_space, 0, 50, &fc);
                add(
                    &format!("cat mv={mv} c1 hits /40"),
                    ps[10..]
                        .iter()
                        .filter(|p| p["c"] == ParamValue::Choice(1))
                        .count() as f64,
                );
            }
            let log_space = SearchSpace {
                params: vec![spec("lr", float(1e-5, 1e-1, None, true))],
            };
            let mut s = TpeSampler::new(&log_space, Direction::Minimize, seeded(seed));
            let ps = run(&mut s, &log_space, 0, 50, &|p: &Params| {
                ((f_of(p, "lr").log10() + 3.0).powi(2), vec![])
            });
            add(
                "log median decades last20",
                median(
                    ps[30..]
                        .iter()
                        .map(|p| (f_of(p, "lr").log10() + 3.0).abs())
                        .collect(),
                ),
            );
            let int_space = SearchSpace {
                params: vec![spec("n", int(2, 31, 3, false))],
            };
            let mut s = TpeSampler::new(&int_space, Direction::Minimize, seeded(seed));
            let ps = run(&mut s, &int_space, 0, 110, &|p: &Params| {
                ((f_of(p, "n") - 14.0).abs(), vec![])
            });
            add(
                "int at optimum /50",
                ps[60..].iter().filter(|p| f_of(p, "n") == 14.0).count() as f64,
            );
            let con_space = SearchSpace {
                params: vec![spec("x", float(0.0, 10.0, None, false))],
            };
            let mut s = TpeSampler::new(&con_space, Direction::Minimize, seeded(seed));
            let ps = run(&mut s, &con_space, 0, 50, &|p: &Params| {
                let x = f_of(p, "x");
                (-x, vec![if x > 5.0 { 1.0 } else { 0.0 }])
            });
            add(
                "constr feasible /20",
                ps[30..].iter().filter(|p| f_of(p, "x") <= 5.0).count() as f64,
            );
            add(
                "constr in [4,5] /20",
                ps[30..]
                    .iter()
                    .filter(|p| (4.0..=5.0).contains(&f_of(p, "x")))
                    .count() as f64,
            );
            let mut s = TpeSampler::new(&x_space(), Direction::Maximize, seeded(seed));
            let ps = run(&mut s, &x_space(), 0, 50, &|p: &Params| {
                (-quadratic(p).0, vec![])
            });
            add(
                "max median|x-3| last20",
                median(
                    ps[30..]
                        .iter()
                        .map(|p| (f_of(p, "x") - 3.0).abs())
                        .collect(),
                ),
            );
            let mut s = TpeSampler::new(&con_space, Direction::Minimize, seeded(seed));
            let ps = run(&mut s, &con_space, 0, 50, &|p: &Params| {
                (-f_of(p, "x"), vec![])
            });
            add(
                "unconstr x<=5 /20",
                ps[30..].iter().filter(|p| f_of(p, "x") <= 5.0).count() as f64,
            );
            add(
                "liar wider",
                (spread(true, seed) > spread(false, seed)) as u8 as f64,
            );
            add("liar spread", spread(true, seed));
            add("no-liar spread", spread(false, seed));
        }
        for (k, v) in res {
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            println!("{k:40} mean {mean:7.3}  min {min:7.3}  max {max:7.3}");
        }
    }

    /// The 5-param timing problem, 100 trials, 20 seeds. Optuna 5.0 over 80 seeds: best 0.29
    /// and median of the last 20 0.70 multivariate, 0.15 and 0.87 independent; this port over
    /// 80 seeds: 0.31 and 0.78, 0.16 and 0.80.
    #[test]
    #[ignore]
    fn compare_mixed_with_optuna() {
        let space = timing_space();
        for mv in [true, false] {
            let (mut bests, mut lasts) = (0.0, 0.0);
            for seed in 0..20 {
                let st = TpeSettings {
                    multivariate: mv,
                    ..seeded(seed)
                };
                let mut s = TpeSampler::new(&space, Direction::Minimize, st);
                let ps = run(&mut s, &space, 0, 100, &timing_objective);
                let vals: Vec<f64> = ps.iter().map(|p| timing_objective(p).0).collect();
                bests += vals.iter().copied().fold(f64::INFINITY, f64::min) / 20.0;
                lasts += median(vals[80..].to_vec()) / 20.0;
            }
            println!("mv={mv} best mean {bests:.3}  median-last20 mean {lasts:.3}");
        }
    }

    /// Optuna 5.0's `_ParzenEstimator(...).log_pdf` on a 7-param space, for 0, 1, 3 and 30
    /// observations (the last exercising the fading weights): per case the observations and
    /// 4 points (rows: lr, dropout, layers, width, opt, sf, si), the joint log density at the
    /// points, and the log density of each param's own 1-D estimator. Generated with NumPy's
    /// `argsort` made stable: Optuna breaks ties between equal observations in whatever order
    /// NumPy's default sort leaves them (which changes the bandwidth each gets), we by trial
    /// order.
    const OPTUNA_GOLDEN: &str = r#"[{"obs":[],"pts":[[0.0001974,0.0754,1,90,2,0.0,8],[0.002144,0.4549,4,54,0,0.75,11],[1.903e-05,0.0454,7,76,2,0.0,5],[0.00333,0.2915,1,606,2,0.75,2]],"joint":[-13.6555808794919,-13.0816116962513,-13.5434860193742,-15.5675038035193],"one":[[-2.19486574466945,-2.18277743886322,-2.2718593459785,-2.18787863016202],[0.673154661050895,0.650156961050895,0.650402661050895,0.730680481050895],[-2.13469319288216,-2.04106519652856,-2.08787919396147,-2.13469319288216],[-5.8950150326838,-5.40138954826392,-5.72998857017769,-7.86907598787956],[-1.09861228866811,-1.09861228866811,-1.09861228866811,-1.09861228866811],[-1.64985937073777,-1.59005909091697,-1.64985937073777,-1.59005909091697],[-1.35568991090153,-1.41786509406142,-1.35568991090153,-1.41786509406142]]},{"obs":[[0.08036,0.0233,3,312,1,0.25,2]],"pts":[[0.001922,0.2801,3,121,2,1.0,5],[0.0003087,0.2739,2,593,0,1.0,5],[0.0009675,0.2659,6,492,2,0.75,8],[0.0001581,0.3972,4,99,2,0.5,11]],"joint":[-14.0363674621098,-15.7240722640133,-15.4493248101517,-13.9712441091239],"one":[[-2.1681317802538,-2.22294754057768,-2.18426163391985,-2.25246776721976],[0.71439951185635,0.718143614904421,0.722750700654061,0.615306319453754],[-2.00959053838642,-2.03307127327584,-2.08442832996367,-2.01063927367854],[-6.17444705068232,-7.78276311699012,-7.58274953742188,-5.98632611787364],[-1.32175583998232,-1.32175583998232,-1.32175583998232,-1.32175583998232],[-1.74993812566563,-1.74993812566563,-1.62367475664957,-1.55334504659122],[-1.32472708874511,-1.32472708874511,-1.38554199881654,-1.51338900840796]]},{"obs":[[0.03166,0.3647,5,639,0,0.0,11],[4.569e-05,0.171,8,447,0,0.0,8],[0.0002293,0.1751,8,609,1,0.0,2]],"pts":[[0.06008,0.237,2,78,2,0.5,11],[0.0001375,0.1929,6,39,1,0.5,5],[0.002778,0.2468,4,802,1,0.25,5],[0.0003905,0.4584,8,98,0,0.75,11]],"joint":[-14.8012682381844,-13.970735280674,-15.5645839925133,-15.091860255591],"one":[[-2.52918446118772,-1.98842184827979,-2.35191559918459,-2.12192176819831],[0.944178183394566,0.987059056385843,0.925210348110485,0.29929901589109],[-2.74748601676463,-1.80655247464546,-2.29922264935509,-1.55109323942097],[-6.73015997800086,-6.4248385542525,-7.41631019985973,-6.71899922639334],[-1.65822807660353,-1.09861228866811,-1.09861228866811,-0.741937344729377],[-2.13933882214663,-2.13933882214663,-1.16099530506776,-2.85664081655331],[-1.22485460296767,-1.4700236737385,-1.4700236737385,-1.22485460296767]]},{"obs":[[0.001577,0.4417,7,900,2,0.5,11],[0.08828,0.3414,7,996,0,0.25,2],[5.068e-05,0.116,4,28,1,1.0,5],[0.0001125,0.002,7,563,1,1.0,8],[0.06492,0.3452,1,483,2,1.0,11],[0.0003911,0.1971,8,665,1,0.0,5],[1.859e-05,0.1044,3,128,1,1.0,2],[2.568e-05,0.2834,2,987,1,1.0,2],[1.911e-05,0.104,7,168,2,0.5,8],[0.002565,0.2371,2,885,1,0.75,11],[0.0008617,0.0429,2,783,1,0.5,11],[0.02067,0.0807,1,226,2,0.5,5],[0.005758,0.4571,5,1017,2,0.0,8],[0.001185,0.4541,6,806,0,1.0,8],[0.003514,0.3066,4,841,0,0.75,5],[6.305e-05,0.2464,1,44,1,0.75,8],[5.951e-05,0.3026,6,473,2,0.5,8],[2.1e-05,0.0511,8,217,1,0.25,11],[0.003135,0.4502,1,506,2,0.5,2],[0.02181,0.06,7,817,2,0.25,11],[0.03598,0.217,6,104,2,0.75,11],[0.0004032,0.4734,3,190,0,0.0,5],[0.002308,0.2327,3,642,2,0.75,8],[4.204e-05,0.2741,1,30,2,0.0,5],[0.0005435,0.4359,4,44,1,0.25,8],[0.001011,0.3818,6,281,2,0.75,5],[1.752e-05,0.37,8,694,2,1.0,11],[0.02035,0.4391,3,560,0,1.0,2],[0.03099,0.3883,1,810,0,0.25,5],[0.0007834,0.3626,1,349,2,1.0,11]],"pts":[[0.01371,0.0531,1,270,0,0.5,2],[0.01228,0.2539,1,794,0,0.75,8],[0.002819,0.2528,4,725,1,0.75,11],[0.001074,0.1238,5,960,2,0.25,11]],"joint":[-18.0955690315301,-17.9157961149873,-19.0134907715957,-19.3519621922038],"one":[[-2.66696959058924,-2.95030235243508,-1.7694034893958,-1.66325068959097],[0.982971910333736,0.907262963910392,0.927791467723208,0.253952748477755],[-1.37812216290989,-1.37812216290989,-2.35717356800029,-2.85497005113197],[-7.15098999560346,-6.80550248124677,-6.8627746779783,-7.12302391784022],[-1.56873254279006,-1.56873254279006,-1.09093305182263,-0.785727425136059],[-1.63193983595797,-1.63859493791482,-1.63859493791482,-1.85659761639231],[-1.83068218990258,-1.34072419100633,-1.17501447925019,-1.17501447925019]]}]"#;

    #[test]
    fn parzen_estimator_matches_optuna() {
        let space = SearchSpace {
            params: vec![
                spec("lr", float(1e-5, 1e-1, None, true)),
                spec("dropout", float(0.0, 0.5, None, false)),
                spec("layers", int(1, 8, 1, false)),
                spec("width", int(16, 1024, 1, true)),
                spec("opt", cat(3)),
                spec("sf", float(0.0, 1.0, Some(0.25), false)),
                spec("si", int(2, 11, 3, false)),
            ],
        };
        let s = TpeSampler::new(&space, Direction::Minimize, seeded(0));
        let to_params = |row: &[serde_json::Value]| -> Params {
            space
                .params
                .iter()
                .zip(row)
                .map(|(p, v)| {
                    let x = v.as_f64().unwrap();
                    let pv = match p.dist {
                        Distribution::Float { .. } => ParamValue::Float(x),
                        Distribution::Int { .. } => ParamValue::Int(x as i64),
                        Distribution::Categorical { .. } => ParamValue::Choice(x as usize),
                    };
                    (p.name.clone(), pv)
                })
                .collect()
        };
        // A point as a candidate: model coordinate, grid index or choice.
        let candidate = |m: &Model, v: &ParamValue| match m {
            Model::Numeric(num) => match num.grid {
                Some(g) => ((f_of_value(v) - g.low) / g.step).round(),
                None => num.coord(f_of_value(v)),
            },
            _ => f_of_value(v),
        };
        let cases: serde_json::Value = serde_json::from_str(OPTUNA_GOLDEN).unwrap();
        for case in cases.as_array().unwrap() {
            let rows: Vec<Box<[f64]>> = case["obs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| s.coords(&to_params(r.as_array().unwrap())))
                .collect();
            let rows: Vec<&[f64]> = rows.iter().map(|r| &r[..]).collect();
            let pts: Vec<Params> = case["pts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| to_params(r.as_array().unwrap()))
                .collect();
            let check = |dims: &[usize], want: &serde_json::Value| {
                let models: Vec<&Model> = dims.iter().map(|&i| &s.models[i]).collect();
                let e = Estimator::new(&models, dims, &rows);
                let cands: Vec<f64> = pts
                    .iter()
                    .flat_map(|p| {
                        dims.iter()
                            .map(|&i| candidate(&s.models[i], &p[&space.params[i].name]))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                for (got, want) in e.log_pdf(&cands).iter().zip(want.as_array().unwrap()) {
                    let want = want.as_f64().unwrap();
                    assert!(
                        (got - want).abs() < 1e-9 * want.abs().max(1.0),
                        "n={} dims {dims:?}: {got} vs Optuna {want}",
                        rows.len()
                    );
                }
            };
            for i in 0..7 {
                check(&[i], &case["one"][i]);
            }
            check(&[0, 1, 2, 3, 4, 5, 6], &case["joint"]);
        }
    }

    fn f_of_value(v: &ParamValue) -> f64 {
        match *v {
            ParamValue::Float(x) => x,
            ParamValue::Int(i) => i as f64,
            ParamValue::Choice(c) => c as f64,
        }
    }

    fn mixed_space() -> SearchSpace {
        SearchSpace {
            params: vec![
                spec("f", float(-1.0, 2.5, None, false)),
                spec("lf", float(1e-5, 1e-1, None, true)),
                spec("sf", float(0.0, 0.3, Some(0.1), false)),
                spec("sf_off", float(0.0, 1.0, Some(0.4), false)),
                spec("slf", float(0.5, 2.0, Some(0.5), true)),
                spec("i", int(-3, 7, 1, false)),
                spec("li", int(1, 1000, 1, true)),
                spec("lis", int(1, 40, 3, true)),
                spec("si", int(2, 11, 3, false)),
                spec("c", cat(4)),
                spec("one", cat(1)),
                spec("pt", float(0.5, 0.5, None, false)),
                spec("pi", int(3, 4, 2, false)),
            ],
        }
    }

    fn mixed_objective(p: &Params) -> (f64, Vec<f64>) {
        let v = (f_of(p, "f") - 1.0).powi(2)
            + (f_of(p, "lf").log10() + 3.0).powi(2)
            + f_of(p, "sf")
            + (f_of(p, "i") - 2.0).abs()
            + (f_of(p, "li").ln() - 3.0).abs()
            + (f_of(p, "c") - 2.0).abs()
            + f_of(p, "lis") / 40.0;
        (v, vec![])
    }

    #[test]
    fn values_stay_in_domain() {
        let space = mixed_space();
        for multivariate in [true, false] {
            let mut s = TpeSampler::new(
                &space,
                Direction::Minimize,
                TpeSettings {
                    multivariate,
                    ..seeded(11)
                },
            );
            let ps = run(&mut s, &space, 0, 310, &mixed_objective);
            for p in &ps[10..] {
                assert_eq!(p.len(), space.params.len());
                for spec in &space.params {
                    assert!(spec.dist.contains(&p[&spec.name]), "{}: {p:?}", spec.name);
                }
            }
            // It also learns: the int param concentrates on its optimum.
            let at_opt = ps[210..].iter().filter(|p| f_of(p, "i") == 2.0).count();
            assert!(
                at_opt > 40,
                "multivariate={multivariate}: {at_opt}/100 at i=2"
            );
        }
    }

    fn quadratic(p: &Params) -> (f64, Vec<f64>) {
        ((f_of(p, "x") - 3.0).powi(2), vec![])
    }

    /// Over the last 20 of 10 random + 40 TPE trials: the median |x - 3|, the same for the
    /// random sampler, and TPE's best |x - 3| over all 50.
    fn quadratic_errors(seed: u64, direction: Direction) -> (f64, f64, f64) {
        let space = x_space();
        let sign = if direction == Direction::Maximize {
            -1.0
        } else {
            1.0
        };
        let f = move |p: &Params| (sign * quadratic(p).0, vec![]);
        let mut tpe = TpeSampler::new(&space, direction, seeded(seed));
        let mut rnd = RandomSampler::new(Some(seed));
        let errs =
            |ps: &[Params]| -> Vec<f64> { ps.iter().map(|p| (f_of(p, "x") - 3.0).abs()).collect() };
        let ps = run(&mut tpe, &space, 0, 50, &f);
        let best = errs(&ps).into_iter().fold(f64::INFINITY, f64::min);
        let rnd_ps = run(&mut rnd, &space, 0, 50, &f);
        (median(errs(&ps[30..])), median(errs(&rnd_ps[30..])), best)
    }

    /// Optuna 5.0's own TPESampler scores a mean 1.86 (1.47 to 2.20 over 20 seeds) on the
    /// median of the last 20; this port 1.87 (1.59 to 2.21). Random: about 5.
    fn check_quadratic(direction: Direction) {
        let (mut tpe_sum, mut rnd_sum) = (0.0, 0.0);
        for seed in 0..5 {
            let (tpe, rnd, best) = quadratic_errors(seed, direction);
            assert!(
                tpe < 2.5 && tpe < rnd,
                "seed {seed}: tpe {tpe}, random {rnd}"
            );
            assert!(best < 0.3, "seed {seed}: best {best}");
            tpe_sum += tpe;
            rnd_sum += rnd;
        }
        assert!(tpe_sum < 0.5 * rnd_sum, "tpe {tpe_sum}, random {rnd_sum}");
    }

    #[test]
    fn converges_on_a_quadratic() {
        check_quadratic(Direction::Minimize);
    }

    #[test]
    fn maximize_negates() {
        check_quadratic(Direction::Maximize);
        // The same history told as maximize of -f proposes exactly what minimize of f does.
        let space = x_space();
        let mut min = TpeSampler::new(&space, Direction::Minimize, seeded(3));
        let mut max = TpeSampler::new(&space, Direction::Maximize, seeded(3));
        for n in 0..30 {
            let p = xp(-10.0 + 20.0 * ((n * 7919) % 30) as f64 / 30.0);
            let v = quadratic(&p).0;
            min.tell(&record(n, &p, v, vec![]));
            max.tell(&record(n, &p, -v, vec![]));
        }
        for k in 0..5 {
            let a = min.sample(&space, &Params::new(), k);
            assert_eq!(a, max.sample(&space, &Params::new(), k));
        }
    }

    #[test]
    fn finds_the_best_choice() {
        let space = SearchSpace {
            params: vec![spec("c", cat(4)), spec("x", float(0.0, 1.0, None, false))],
        };
        // "c1" is best whatever x.
        let f = |p: &Params| {
            let c = if p["c"] == ParamValue::Choice(1) {
                0.0
            } else {
                1.0
            };
            (c + 0.3 * f_of(p, "x"), vec![])
        };
        for multivariate in [true, false] {
            let settings = TpeSettings {
                multivariate,
                ..seeded(5)
            };
            let mut s = TpeSampler::new(&space, Direction::Minimize, settings);
            let ps = run(&mut s, &space, 0, 50, &f);
            let hits = ps[10..]
                .iter()
                .filter(|p| p["c"] == ParamValue::Choice(1))
                .count();
            // Optuna 5.0 (and this port, over 20 seeds): 22 to 25 multivariate, 27 to 30 not.
            let want = if multivariate { 20 } else { 25 };
            assert!(hits > want, "multivariate={multivariate}: {hits}/40");
        }
    }

    #[test]
    fn log_param_found_in_log_space() {
        let space = SearchSpace {
            params: vec![spec("lr", float(1e-5, 1e-1, None, true))],
        };
        let f = |p: &Params| ((f_of(p, "lr").log10() + 3.0).powi(2), vec![]);
        for seed in 0..3 {
            let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(seed));
            let ps = run(&mut s, &space, 0, 50, &f);
            let err = median(
                ps[30..]
                    .iter()
                    .map(|p| (f_of(p, "lr").log10() + 3.0).abs())
                    .collect(),
            );
            // A linear-space model would sit near 0.05, four decades away.
            assert!(err < 0.5, "seed {seed}: median decades off {err}");
        }
    }

    #[test]
    fn stepped_int_stays_on_the_grid() {
        // high is off the grid: the legal values are 2, 5, ..., 29.
        let space = SearchSpace {
            params: vec![spec("n", int(2, 31, 3, false))],
        };
        let f = |p: &Params| ((f_of(p, "n") - 14.0).abs(), vec![]);
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(3));
        let ps = run(&mut s, &space, 0, 110, &f);
        let mut seen = std::collections::BTreeSet::new();
        for p in &ps {
            let ParamValue::Int(n) = p["n"] else {
                panic!("{p:?}")
            };
            assert!((2..=29).contains(&n) && (n - 2) % 3 == 0, "{n}");
            seen.insert(n);
        }
        assert!(seen.contains(&14));
        let at_opt = ps[60..].iter().filter(|p| f_of(p, "n") == 14.0).count();
        assert!(at_opt > 25, "{at_opt}/50 at the optimum");
    }

    /// Mean pairwise distance of 4 consecutive proposals made while 4 trials run at the best x.
    fn spread(constant_liar: bool, seed: u64) -> f64 {
        let space = x_space();
        let settings = TpeSettings {
            constant_liar,
            ..seeded(seed)
        };
        let mut s = TpeSampler::new(&space, Direction::Minimize, settings);
        let ps = run(&mut s, &space, 0, 30, &quadratic);
        let best = ps
            .iter()
            .map(|p| f_of(p, "x"))
            .min_by(|a, b| (a - 3.0).abs().total_cmp(&(b - 3.0).abs()))
            .unwrap();
        for (i, dx) in [-0.1, 0.0, 0.1, 0.2].iter().enumerate() {
            let mut p = Params::new();
            p.insert(
                "x".into(),
                ParamValue::Float((best + dx).clamp(-10.0, 10.0)),
            );
            s.observe(30 + i as i64, &p);
        }
        let xs: Vec<f64> = (34..38)
            .map(|k| {
                let p = s.sample(&space, &Params::new(), k as u64).unwrap();
                s.observe(k, &p);
                f_of(&p, "x")
            })
            .collect();
        let mut total = 0.0;
        for i in 0..4 {
            for j in i + 1..4 {
                total += (xs[i] - xs[j]).abs();
            }
        }
        total / 6.0
    }

    #[test]
    fn constant_liar_spreads_concurrent_proposals() {
        let seeds = 0..8;
        let liar: f64 = seeds.clone().map(|s| spread(true, s)).sum::<f64>() / 8.0;
        let honest: f64 = seeds.clone().map(|s| spread(false, s)).sum::<f64>() / 8.0;
        assert!(liar > 1.5 * honest, "liar {liar}, without {honest}");
        let wider = seeds
            .filter(|&s| spread(true, s) > spread(false, s))
            .count();
        assert!(wider >= 6, "wider in {wider}/8 seeds");
    }

    #[test]
    fn infeasible_region_is_avoided() {
        let space = SearchSpace {
            params: vec![spec("x", float(0.0, 10.0, None, false))],
        };
        // Better the larger x, but x > 5 violates a constraint.
        let shares = |constrained: bool| {
            let f = move |p: &Params| {
                let x = f_of(p, "x");
                let c = if constrained {
                    vec![if x > 5.0 { 1.0 } else { 0.0 }]
                } else {
                    vec![]
                };
                (-x, c)
            };
            let (mut ok, mut near) = (0, 0);
            for seed in 0..4 {
                let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(seed));
                let ps = run(&mut s, &space, 0, 50, &f);
                ok += ps[30..].iter().filter(|p| f_of(p, "x") <= 5.0).count();
                near += ps[30..]
                    .iter()
                    .filter(|p| (4.0..=5.0).contains(&f_of(p, "x")))
                    .count();
            }
            (ok, near)
        };
        // Optuna 5.0 over 20 seeds: 9 to 14 of the last 20 feasible, 5 to 8 in [4, 5];
        // without the constraint 0 to 4 have x <= 5.
        let (ok, near) = shares(true);
        assert!(ok > 40, "{ok}/80 feasible");
        assert!(near >= 16, "{near}/80 in [4, 5]: it climbs to the boundary");
        let (free, _) = shares(false);
        assert!(free < 16, "{free}/80 at x <= 5 without the constraint");
    }

    fn xp(x: f64) -> Params {
        let mut p = Params::new();
        p.insert("x".into(), ParamValue::Float(x));
        p
    }

    #[test]
    fn split_ranks_complete_then_pruned_then_infeasible() {
        let space = x_space();
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(0));
        let below = |s: &TpeSampler| -> Vec<f64> { s.split(None).0.iter().map(|r| r[0]).collect() };
        // x encodes the trial number.
        let pruned = |n: i64, v: Option<f64>| TrialRecord {
            number: n,
            params: xp(n as f64),
            state: TrialState::Pruned,
            value: v,
            constraints: vec![],
        };
        s.tell(&record(0, &xp(0.0), 5.0, vec![]));
        s.tell(&pruned(1, Some(-100.0)));
        s.tell(&record(2, &xp(2.0), -50.0, vec![0.5]));
        s.tell(&pruned(3, None));
        s.tell(&pruned(4, Some(1.0)));
        // n = 5: one below, the complete trial even though others have better values.
        assert_eq!(below(&s), [0.0]);
        for n in 5..16 {
            s.tell(&pruned(n, Some(n as f64)));
        }
        // n = 16: two below; then the best pruned trial.
        assert_eq!(below(&s), [0.0, 1.0]);
        for n in 16..21 {
            s.tell(&pruned(n, None));
        }
        // n = 21: three below.
        assert_eq!(below(&s), [0.0, 1.0, 4.0]);
        // Only infeasible and value-less pruned trials left after 16 more: infeasible last.
        let mut s2 = TpeSampler::new(&space, Direction::Maximize, seeded(0));
        s2.tell(&record(0, &xp(0.0), 1.0, vec![3.0]));
        s2.tell(&record(1, &xp(1.0), 1.0, vec![0.0, 2.0, -1.0]));
        s2.tell(&pruned(2, None));
        s2.tell(&record(3, &xp(3.0), 1.0, vec![]));
        s2.tell(&pruned(4, Some(9.0)));
        s2.tell(&pruned(5, Some(10.0)));
        for n in 6..21 {
            s2.tell(&record(n, &xp(n as f64), 1.0, vec![1.0 + n as f64]));
        }
        // n = 21 -> 3 below: the complete, the best pruned (maximizing), the other pruned.
        assert_eq!(below(&s2), [3.0, 4.0, 5.0]);
        s2.tell(&TrialRecord {
            number: 3,
            params: xp(3.0),
            state: TrialState::Fail,
            value: None,
            constraints: vec![],
        });
        s2.tell(&TrialRecord {
            number: 4,
            params: xp(4.0),
            state: TrialState::Fail,
            value: None,
            constraints: vec![],
        });
        // n = 19 -> 2 below: pruned 5, then pruned-without-value 2 before the infeasible.
        assert_eq!(below(&s2), [2.0, 5.0]);
        for n in [5, 2] {
            s2.tell(&TrialRecord {
                number: n,
                params: xp(n as f64),
                state: TrialState::Fail,
                value: None,
                constraints: vec![],
            });
        }
        // n = 17 -> 2 below: the least violated (1: 2.0; 0: 3.0), in number order.
        assert_eq!(below(&s2), [0.0, 1.0]);
    }

    #[test]
    fn running_trials_go_above_only_with_constant_liar() {
        let space = x_space();
        for liar in [true, false] {
            let settings = TpeSettings {
                constant_liar: liar,
                ..seeded(0)
            };
            let mut s = TpeSampler::new(&space, Direction::Minimize, settings);
            for n in 0..10 {
                s.tell(&record(n, &xp(n as f64), n as f64, vec![]));
            }
            s.observe(10, &xp(-3.0));
            s.observe(11, &Params::new());
            s.observe(3, &xp(7.0)); // already finished: ignored
            let above: Vec<f64> = s.split(None).1.iter().map(|r| r[0]).collect();
            let mut want: Vec<f64> = (1..10).map(|n| n as f64).collect();
            if liar {
                want.extend([-3.0, f64::NAN]);
            }
            assert_eq!(format!("{above:?}"), format!("{want:?}"));
            // The trial being proposed for is not its own liar.
            let n_above = s.split(Some(10)).1.len();
            assert_eq!(n_above, if liar { 10 } else { 9 });
            s.tell(&record(10, &xp(-3.0), -1.0, vec![]));
            s.tell(&record(11, &xp(1.5), 1.5, vec![]));
            assert_eq!(s.split(None).0.len(), 2);
            assert_eq!(s.split(None).1.len(), 10);
            assert!(s.running.is_empty());
        }
    }

    #[test]
    fn fail_trials_count_only_when_infeasible() {
        let space = x_space();
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(9));
        let fail = |n: i64, c: Vec<f64>| TrialRecord {
            number: n,
            params: xp(n as f64 - 5.0),
            state: TrialState::Fail,
            value: None,
            constraints: c,
        };
        for n in 0..9 {
            s.tell(&record(n, &xp(n as f64), 1.0, vec![]));
        }
        s.tell(&fail(9, vec![]));
        s.tell(&fail(10, vec![1.0]));
        assert_eq!(s.finished.len(), 10);
        assert_eq!(s.n_counted(), 9);
        // Still in startup: the proposal is the random sampler's.
        let random = RandomSampler::new(Some(9)).sample(&space, &Params::new(), 77);
        assert_eq!(s.sample(&space, &Params::new(), 77), random);
        s.tell(&record(11, &xp(1.0), 1.0, vec![]));
        assert_ne!(s.sample(&space, &Params::new(), 77), random);
        assert_eq!(s.split(None).1.len(), 10);
    }

    #[test]
    fn proposal_is_a_function_of_seed_key_and_history() {
        let space = mixed_space();
        let make = || {
            let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(21));
            run(&mut s, &space, 0, 15, &mixed_objective);
            s
        };
        let (mut a, mut b) = (make(), make());
        let none = Params::new();
        let pa: Vec<_> = (100..105).map(|k| a.sample(&space, &none, k)).collect();
        for k in (100..105).rev() {
            b.sample(&space, &none, k + 1000);
            assert_eq!(b.sample(&space, &none, k), pa[(k - 100) as usize]);
        }
        assert_ne!(pa[0], pa[1]);
        let mut other = TpeSampler::new(&space, Direction::Minimize, seeded(22));
        run(&mut other, &space, 0, 15, &mixed_objective);
        // Same keys, other seed: its history differs too, but the point is that it varies.
        assert_ne!(other.sample(&space, &none, 100), pa[0]);
        // Unseeded still works and varies.
        let mut u = TpeSampler::new(&space, Direction::Minimize, TpeSettings::default());
        run(&mut u, &space, 0, 12, &mixed_objective);
        assert_ne!(u.sample(&space, &none, 0), u.sample(&space, &none, 0));
    }

    #[test]
    fn startup_is_the_random_sampler() {
        let space = mixed_space();
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(4));
        let mut r = RandomSampler::new(Some(4));
        let none = Params::new();
        for k in 0..10u64 {
            let p = s.sample(&space, &none, k);
            assert_eq!(p, r.sample(&space, &none, k));
            s.tell(&record(k as i64, &p.unwrap(), k as f64, vec![]));
        }
        // Uniform: quartiles of x over many startup proposals.
        let fresh = TpeSampler::new(&x_space(), Direction::Minimize, seeded(4));
        let mut fresh = fresh;
        let mut bins = [0; 4];
        for k in 0..4000 {
            let x = f_of(&fresh.sample(&x_space(), &none, k).unwrap(), "x");
            bins[(((x + 10.0) / 5.0) as usize).min(3)] += 1;
        }
        assert!(bins.iter().all(|&b| (900..1100).contains(&b)), "{bins:?}");
    }

    #[test]
    fn fixed_and_foreign_params() {
        let space = mixed_space();
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(8));
        run(&mut s, &space, 0, 20, &mixed_objective);
        let mut fixed = Params::new();
        fixed.insert("f".into(), ParamValue::Float(123.0));
        fixed.insert("c".into(), ParamValue::Choice(3));
        fixed.insert("extra".into(), ParamValue::Int(9));
        // The config changed under the sampler: "i" widened, "new" appeared.
        let mut wider = space.clone();
        wider.params[5].dist = int(-30, 70, 1, false);
        wider.params.push(spec("new", float(5.0, 6.0, None, false)));
        for k in 0..30 {
            let p = s.sample(&wider, &fixed, k).unwrap();
            assert_eq!(p["f"], ParamValue::Float(123.0));
            assert_eq!(p["c"], ParamValue::Choice(3));
            assert_eq!(p["extra"], ParamValue::Int(9));
            assert_eq!(p["one"], ParamValue::Choice(0));
            assert_eq!(p["pt"], ParamValue::Float(0.5));
            assert_eq!(p["pi"], ParamValue::Int(3));
            assert_eq!(p.len(), wider.params.len() + 1);
            for spec in &wider.params {
                if !fixed.contains_key(&spec.name) {
                    assert!(spec.dist.contains(&p[&spec.name]), "{}: {p:?}", spec.name);
                }
            }
        }
        // Trials with a value outside the domain or of the wrong type are not modelled.
        let mut odd = Params::new();
        odd.insert("f".into(), ParamValue::Float(99.0));
        odd.insert("i".into(), ParamValue::Float(2.0));
        odd.insert("c".into(), ParamValue::Choice(9));
        let c = s.coords(&odd);
        assert!(c.iter().all(|x| x.is_nan()), "{c:?}");
    }

    #[test]
    fn invalid_distribution_is_refused_not_invented() {
        let space = SearchSpace {
            params: vec![
                spec("x", float(0.0, 1.0, None, false)),
                spec("bad", int(5, 1, 1, false)),
            ],
        };
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(1));
        for n in 0..12 {
            let mut p = xp(n as f64 / 12.0);
            p.insert("bad".into(), ParamValue::Int(3));
            s.tell(&record(n, &p, n as f64, vec![]));
        }
        assert_eq!(s.sample(&space, &Params::new(), 0), None);
        let mut fixed = Params::new();
        fixed.insert("bad".into(), ParamValue::Int(3));
        let p = s.sample(&space, &fixed, 0).unwrap();
        assert!(space.params[0].dist.contains(&p["x"]));
    }

    fn timing_space() -> SearchSpace {
        SearchSpace {
            params: vec![
                spec("lr", float(1e-5, 1e-1, None, true)),
                spec("dropout", float(0.0, 0.5, None, false)),
                spec("layers", int(1, 8, 1, false)),
                spec("width", int(16, 1024, 1, true)),
                spec("opt", cat(3)),
            ],
        }
    }

    fn timing_objective(p: &Params) -> (f64, Vec<f64>) {
        let v = (f_of(p, "lr").log10() + 3.0).powi(2)
            + (f_of(p, "dropout") - 0.2).powi(2)
            + (f_of(p, "layers") - 4.0).abs()
            + (f_of(p, "width").log2() - 8.0).abs()
            + f_of(p, "opt");
        (v, vec![])
    }

    /// `cargo test --release -- --ignored --nocapture timing`: 1000 sequential
    /// sample + observe + tell cycles on a 5-param space, then the cost of one proposal with
    /// 1000 trials of history.
    #[test]
    #[ignore]
    fn timing() {
        let space = timing_space();
        for multivariate in [true, false] {
            let settings = TpeSettings {
                multivariate,
                ..seeded(1)
            };
            let mut s = TpeSampler::new(&space, Direction::Minimize, settings);
            let t = std::time::Instant::now();
            let ps = run(&mut s, &space, 0, 1000, &timing_objective);
            let total = t.elapsed().as_secs_f64() * 1e3;
            let t = std::time::Instant::now();
            for k in 0..50 {
                s.sample(&space, &Params::new(), 1000 + k);
            }
            let last = t.elapsed().as_secs_f64() * 1e3 / 50.0;
            let best = ps
                .iter()
                .map(|p| timing_objective(p).0)
                .fold(f64::INFINITY, f64::min);
            println!(
                "multivariate={multivariate}: 1000 cycles in {total:.0} ms = {:.2} ms/cycle; \
                 {last:.2} ms/sample at 1000 trials; best {best:.3}",
                total / 1000.0
            );
        }
    }

    #[test]
    fn long_history_split_keeps_the_best_of_all_and_a_window_of_the_rest() {
        let space = x_space();
        let mut s = TpeSampler::new(&space, Direction::Minimize, seeded(1));
        let n = 3 * HISTORY_WINDOW as i64;
        let mut values = Vec::new();
        for i in 0..n {
            // Values scattered so that the best ones are old and new alike.
            let v = ((i * 7919) % 1009) as f64 + (i as f64) * 1e-6;
            values.push((v, i));
            s.tell(&record(i, &xp((i % 20) as f64 - 10.0), v, vec![]));
        }
        let (below, above) = s.split(None);
        let gamma = default_gamma(n as usize);
        assert_eq!(below.len(), gamma);
        assert_eq!(above.len(), HISTORY_WINDOW);
        // Below: exactly the gamma best of all trials, in trial order.
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut best: Vec<i64> = values[..gamma].iter().map(|v| v.1).collect();
        best.sort();
        let expect: Vec<Box<[f64]>> = best
            .iter()
            .map(|i| s.coords(&xp((i % 20) as f64 - 10.0)))
            .collect();
        for (b, e) in below.iter().zip(&expect) {
            assert_eq!(&b[..], &e[..]);
        }
        // Proposals stay in the domain with the long history.
        for k in 0..20u64 {
            let p = s.sample(&space, &Params::new(), n as u64 + k).unwrap();
            assert!(space.params[0].dist.contains(&p["x"]));
        }
    }
}
