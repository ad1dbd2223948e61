//! Gaussian-process Bayesian optimization, after Optuna 5.0's `GPSampler` (one objective): the
//! sampler for small budgets, where each trial is expensive and tens to a few hundred of them
//! must find a good configuration.
//!
//! References: Optuna 5.0's `samplers/_gp/sampler.py` and `_gp/{gp,prior,acqf,optim_mixed,
//! search_space}.py`; Ament et al. 2023, "Unexpected Improvements to Expected Improvement for
//! Bayesian Optimization" (log EI); Gardner et al. 2014 (constraints). The tests check the
//! kernel, the fit's loss and gradient, the fitted hyperparameters, the posterior and the
//! acquisition values and gradients against Optuna's own code through golden data
//! (`optuna_golden.py` writes `optuna_golden.json` beside this file).
//!
//! The parts, each in its file: `space` (params as coordinates), `qmc` (quasi-random points),
//! `kernel` (Matérn 5/2 with a length scale per param), `linalg` (Cholesky), `lbfgsb` (the
//! box-constrained quasi-Newton method), `fit` (the GP and its hyperparameters), `special`
//! (normal log functions), `warp` (the values' power transform), `acquisition` (log EI and its
//! batch and constrained forms), `optimizer` (where the acquisition is highest). This file
//! decides what they are given.
//!
//! As Optuna's:
//! - **startup**: until `n_startup_trials` trials are COMPLETE, and for every param outside
//!   the relative search space, values come from [`RandomSampler`] with the same seed.
//! - **search space**: Optuna's `IntersectionSearchSpace` over the COMPLETE trials (the names
//!   whose distribution is the same in all of them), single-valued params left out; a
//!   define-by-run objective gets GP proposals for the params all its trials share, and random
//!   ones for its branches.
//! - **model**: the COMPLETE trials' values (negated when minimizing, then standardized), a GP
//!   with Optuna's kernel, priors and fit (`fit`); PRUNED trials are left out, as Optuna's.
//!   The values are power-transformed first (below).
//! - **acquisition**: log EI over the best feasible value; with running trials (RUNNING or
//!   WAITING, with the values they have so far or were proposed, as Optuna's `_get_params`;
//!   those lacking a param of the space are left out) the batch form over fantasies of their
//!   values; with constraints (Optuna's `constraints` attribute; any value above 0 is
//!   infeasible) one GP per constraint and the log probability of feasibility added, the
//!   threshold being the best *feasible* value.
//! - **optimizer**: `optimizer`, warm-started at the best feasible trial.
//! - **seed**: the random sampler's draws are keyed as everywhere in sweepd; a proposal's own
//!   randomness (the quasi-random points, the roulette, the base samples) is the stream of
//!   (seed, trial number).
//!
//! Deliberate differences:
//! - **Warped values.** Before they are standardized, the objective's values go through a
//!   Yeo-Johnson power transform fitted to them (`warp`, as HEBO does), which draws in a loss
//!   whose bad trials are orders of magnitude worse than its good ones; Optuna's GP models the
//!   values as they are. Against Optuna's GP it ends lower in 0.54 to 0.99 of the pairs of
//!   runs on the bench's six functions, where the values as they are gave 0.28 to 0.66
//!   (`docs/decisions.md`, "The GP learns from power-transformed values").
//! - **Bounded cost.** Optuna fits every COMPLETE trial, cubic in their number. Past
//!   [`MAX_FIT_TRIALS`], the fit takes that many: the best quarter (feasible first, by
//!   value), the newest half (by trial number), and the rest chosen to cover the space (the
//!   farthest from those taken, one at a time, among at most [`FILL_POOL`] older trials spread
//!   over the study). The best trials keep the threshold and the incumbent's neighbourhood; the
//!   newest carry what the search is exploring now; the spread ones keep the model from
//!   forgetting the regions already found poor, which it would otherwise revisit. So a
//!   proposal costs about what it costs at `MAX_FIT_TRIALS` trials however long the study.
//!   At most [`MAX_RUNNING`] running trials (the newest) condition the batch acquisition.
//! - **No warm start of the fit** (see `fit`): a proposal depends on the trials, not on this
//!   process's earlier proposals, so a restarted daemon proposes what the first would have.
//! - **Infeasible failures.** A FAIL trial with a violated constraint (sweepd's out-of-memory
//!   verdict: it did not fit even alone on the device) has no value for the objective's GP but
//!   joins the constraints' GPs, so the region that ran out of memory is avoided; that mark
//!   has a GP of its own beside the objective's constraints (`constraint_columns`). Trials
//!   with fewer constraint values than others count the missing ones as 0 (satisfied); Optuna
//!   refuses such a study.
//! - **Enqueued values are conditioned on**: a param of the space the trial already holds is
//!   pinned while the acquisition is optimized over the others (Optuna optimizes all of them
//!   and then overrides).
//! - A COMPLETE value of NaN counts as the worst, infinite values are clipped to the finite
//!   range as Optuna does; the quasi-random points are `sobol_burley`'s, not SciPy's.
//! - One objective only: `build` refuses the GP with several (Optuna's multi-objective GP, log
//!   EHVI, is not here).

use super::{keyed_rng, Proposal, Relative, RELATIVE_DOMAIN};
use crate::config::SamplerConfig;
use crate::sampler::{RandomSampler, Sampler};
use crate::study::{
    Direction, Distribution, Dists, ParamValue, Params, SearchSpace, TrialRecord, TrialState,
};
use acquisition::{Acquisition, QMC_SAMPLES};
use fit::{Data, Gp};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use space::Space;
use std::collections::{BTreeMap, HashMap, HashSet};

mod acquisition;
mod fit;
mod kernel;
mod lbfgsb;
mod linalg;
mod optimizer;
mod qmc;
mod space;
mod special;
#[cfg(test)]
mod tests;
mod warp;

/// The most trials a fit takes (see the module docs).
pub const MAX_FIT_TRIALS: usize = 200;
/// The most older trials the space-filling part of a bounded fit chooses among.
pub const FILL_POOL: usize = 1000;
/// The most running trials the batch acquisition conditions on.
pub const MAX_RUNNING: usize = 64;

/// Param names as small ids, so that a stored trial is a short list of (id, value).
#[derive(Default)]
struct Names {
    ids: HashMap<String, u32>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(name.to_owned()).or_insert(next)
    }

    fn compact(&mut self, params: &Params) -> Box<[(u32, ParamValue)]> {
        params
            .iter()
            .map(|(n, v)| (self.id(n), v.clone()))
            .collect()
    }
}

/// A trial the GPs learn from.
struct Row {
    params: Box<[(u32, ParamValue)]>,
    /// The objective to minimize (negated when maximizing; NaN as +inf); `None` for an
    /// infeasible FAIL trial.
    loss: Option<f64>,
    constraints: Vec<f64>,
}

impl Row {
    fn feasible(&self) -> bool {
        self.constraints.iter().all(|c| *c <= 0.0)
    }
}

/// A trial of the history, as coordinates of the proposal's space.
struct Point<'a> {
    number: i64,
    row: &'a Row,
    x: Vec<f64>,
}

/// The GP sampler.
pub struct GpSampler {
    direction: Direction,
    /// `[sampler]`, with `seed` the one resolved for this study.
    settings: SamplerConfig,
    names: Names,
    /// COMPLETE trials and infeasible FAIL ones, by number.
    rows: BTreeMap<i64, Row>,
    n_complete: usize,
    /// Trials observed and not told final, with their params so far.
    running: BTreeMap<i64, Params>,
    finished: HashSet<i64>,
    /// Optuna's intersection search space over the COMPLETE trials.
    intersection: Option<Dists>,
    random: RandomSampler,
    /// Used only when unseeded.
    entropy: ChaCha8Rng,
}

impl GpSampler {
    pub fn new(direction: Direction, settings: SamplerConfig) -> GpSampler {
        GpSampler {
            direction,
            random: RandomSampler::new(settings.seed),
            settings,
            names: Names::default(),
            rows: BTreeMap::new(),
            n_complete: 0,
            running: BTreeMap::new(),
            finished: HashSet::new(),
            intersection: None,
            entropy: ChaCha8Rng::from_entropy(),
        }
    }

    fn rng(&mut self, seed_key: u64) -> ChaCha8Rng {
        match self.settings.seed {
            Some(seed) => keyed_rng(seed, seed_key, "", RELATIVE_DOMAIN),
            None => ChaCha8Rng::seed_from_u64(self.entropy.gen()),
        }
    }

    /// The relative search space: the intersection, single-valued params left out.
    fn relative_space(&self) -> Vec<(String, Distribution)> {
        self.intersection
            .iter()
            .flatten()
            .filter(|(_, d)| d.single().is_none() && d.check().is_ok())
            .map(|(n, d)| (n.clone(), d.clone()))
            .collect()
    }

    /// `params` (a stored row) as coordinates of `space`.
    fn coords(&self, space: &Space, row: &[(u32, ParamValue)]) -> Option<Vec<f64>> {
        let params: Params = space
            .names
            .iter()
            .filter_map(|n| {
                let id = *self.names.ids.get(n)?;
                let v = row.iter().find(|(i, _)| *i == id)?;
                Some((n.clone(), v.1.clone()))
            })
            .collect();
        space.normalize(&params)
    }

    /// GP proposals for the relative search space, `fixed` pinned; `None` when there is
    /// nothing to propose or no model could be fitted.
    fn propose_relative(
        &mut self,
        fixed: &Params,
        current: Option<i64>,
        seed_key: u64,
    ) -> Option<Relative> {
        let space = Space::new(self.relative_space());
        if space.dim() == 0 {
            return None;
        }
        let mut rng = self.rng(seed_key);
        let pinned: Vec<Option<f64>> = (0..space.dim())
            .map(|i| {
                let v = fixed.get(&space.names[i])?;
                space.dists[i]
                    .contains(v)
                    .then(|| space.dims[i].normalize(space.dists[i].to_internal(v)))
            })
            .collect();
        if pinned.iter().all(Option::is_some) {
            return None;
        }
        let points: Vec<Point> = self
            .rows
            .iter()
            .filter_map(|(&number, row)| {
                let x = self.coords(&space, &row.params)?;
                Some(Point { number, row, x })
            })
            .collect();
        let chosen = select(&points, MAX_FIT_TRIALS);
        let points: Vec<&Point> = chosen.into_iter().map(|i| &points[i]).collect();
        let running: Vec<Vec<f64>> = if self.settings.constant_liar {
            self.running
                .iter()
                .rev()
                .filter(|(n, _)| Some(**n) != current)
                .filter_map(|(_, p)| space.normalize(p))
                .take(MAX_RUNNING)
                .collect()
        } else {
            Vec::new()
        };
        let (acqf, best) = self.acquisition(&space, &points, &running, &mut rng)?;
        let problem = optimizer::Problem {
            acqf: &acqf,
            space: &space,
            pinned: &pinned,
        };
        let mut warm: Vec<Vec<f64>> = best.into_iter().collect();
        for w in &mut warm {
            for (c, p) in w.iter_mut().zip(&pinned) {
                if let Some(v) = p {
                    *c = *v;
                }
            }
        }
        let (x, _) = optimizer::optimize(&problem, &warm, rng.gen(), &mut rng);
        Some(
            space
                .values(&x)
                .into_iter()
                .zip(&pinned)
                .filter(|(_, p)| p.is_none())
                .map(|((n, d, v), _)| (n, (d, v)))
                .collect(),
        )
    }

    /// The acquisition function from the chosen trials and the running ones, and the best
    /// feasible trial's point (the optimizer's warm start).
    fn acquisition(
        &self,
        space: &Space,
        points: &[&Point],
        running: &[Vec<f64>],
        rng: &mut ChaCha8Rng,
    ) -> Option<(Acquisition, Option<Vec<f64>>)> {
        let is_cat = space.is_categorical();
        let det = self.settings.deterministic_objective;
        let objective: Vec<&&Point> = points.iter().filter(|p| p.row.loss.is_some()).collect();
        if objective.is_empty() {
            return None;
        }
        // Losses, non-finite ones clipped as Optuna clips them, warped (`warp`), then negated:
        // the GP models what it maximizes, standardized as Optuna's values are.
        let neg: Vec<f64> = objective
            .iter()
            .map(|p| -p.row.loss.unwrap_or(0.0))
            .collect();
        let losses: Vec<f64> = finite_clipped(&neg).iter().map(|v| -v).collect();
        let warped: Vec<f64> = warp::warp(&losses).iter().map(|w| -w).collect();
        let y = standardize(&warped);
        let data = Data {
            x: objective.iter().map(|p| p.x.clone()).collect(),
            y: y.clone(),
            is_cat: is_cat.clone(),
        };
        let gp = Gp::fit(&data, det)?;
        // The best feasible standardized value, and where.
        let mut best: Option<(f64, &Vec<f64>)> = None;
        for (p, &v) in objective.iter().zip(&y) {
            if p.row.feasible() && best.is_none_or(|b| v > b.0) {
                best = Some((v, &p.x));
            }
        }
        let threshold = best.map_or(f64::NEG_INFINITY, |b| b.0);
        let columns = constraint_columns(
            &points
                .iter()
                .map(|p| (&p.row.constraints[..], p.row.loss.is_none()))
                .collect::<Vec<_>>(),
        );
        let n_constraints = columns.first().map_or(0, Vec::len);
        let mut constraints = Vec::with_capacity(n_constraints);
        for c in 0..n_constraints {
            // Optuna models -c (to be maximized); feasible is -c >= 0.
            let neg: Vec<f64> = columns.iter().map(|row| -row[c]).collect();
            let (mean, std) = mean_std(&finite_clipped(&neg));
            let data = Data {
                x: points.iter().map(|p| p.x.clone()).collect(),
                y: standardize(&neg),
                is_cat: is_cat.clone(),
            };
            constraints.push((Gp::fit(&data, det)?, -mean / std.max(STD_FLOOR)));
        }
        let qmc_seed: u32 = rng.gen::<u32>() >> 2;
        let bases: Vec<Vec<Vec<f64>>> = (0..=n_constraints)
            .map(|i| {
                qmc::normal(
                    QMC_SAMPLES,
                    running.len() + 1,
                    qmc_seed.wrapping_add(i as u32),
                )
            })
            .collect();
        let batch = (!running.is_empty()).then_some((running, bases));
        let acqf = Acquisition::new(gp, threshold, constraints, batch);
        Some((acqf, best.map(|b| b.1.clone())))
    }
}

/// Optuna's floor on a standard deviation.
const STD_FLOOR: f64 = 1e-10;

/// Each row's constraint values in the columns the constraints' GPs are fitted on, from
/// (its values, whether it is an infeasible FAIL). A COMPLETE trial's values are the
/// objective's constraints, by place (`study::constraint_values`: by key). An infeasible FAIL
/// is sweepd's out-of-memory verdict: its last value is that mark, which gets a column of its
/// own after the objective's (0 for every other row), so that a study whose objective sets
/// constraints does not model an out-of-memory trial as violating the first of them. Missing
/// values are 0 (satisfied).
fn constraint_columns(rows: &[(&[f64], bool)]) -> Vec<Vec<f64>> {
    fn own<'a>(&(values, failed): &(&'a [f64], bool)) -> &'a [f64] {
        if failed {
            &values[..values.len().saturating_sub(1)]
        } else {
            values
        }
    }
    let k = rows.iter().map(|r| own(r).len()).max().unwrap_or(0);
    let marked = rows
        .iter()
        .any(|(values, failed)| *failed && !values.is_empty());
    rows.iter()
        .map(|r| {
            let mut out = own(r).to_vec();
            out.resize(k, 0.0);
            if marked {
                out.push(if r.1 {
                    r.0.last().copied().unwrap_or(0.0)
                } else {
                    0.0
                });
            }
            out
        })
        .collect()
}

/// Non-finite values clipped to the finite ones' range (all 0 when none is finite), as
/// Optuna's `warn_and_convert_inf`; NaN counts as the lowest.
fn finite_clipped(v: &[f64]) -> Vec<f64> {
    let finite = v.iter().copied().filter(|x| x.is_finite());
    let lo = finite.clone().fold(f64::INFINITY, f64::min);
    let hi = finite.fold(f64::NEG_INFINITY, f64::max);
    if lo > hi {
        return vec![0.0; v.len()];
    }
    v.iter()
        .map(|&x| if x.is_nan() { lo } else { x.clamp(lo, hi) })
        .collect()
}

/// Mean and (population) standard deviation.
fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Optuna's `_standardize_values` of one column.
fn standardize(v: &[f64]) -> Vec<f64> {
    let v = finite_clipped(v);
    let (mean, std) = mean_std(&v);
    v.iter().map(|x| (x - mean) / std.max(STD_FLOOR)).collect()
}

/// Which trials a fit takes when there are more than `cap` (see the module docs): their
/// indices in `points`, in trial order.
fn select(points: &[Point], cap: usize) -> Vec<usize> {
    let n = points.len();
    if n <= cap {
        return (0..n).collect();
    }
    let mut taken = vec![false; n];
    let mut chosen = Vec::with_capacity(cap);
    let take = |i: usize, taken: &mut Vec<bool>, chosen: &mut Vec<usize>| {
        if !taken[i] {
            taken[i] = true;
            chosen.push(i);
        }
    };
    // The best quarter: feasible before infeasible, by loss, then by number.
    let mut ranked: Vec<usize> = (0..n).filter(|&i| points[i].row.loss.is_some()).collect();
    ranked.sort_by(|&a, &b| {
        let (ra, rb) = (points[a].row, points[b].row);
        rb.feasible()
            .cmp(&ra.feasible())
            .then(ra.loss.unwrap_or(0.0).total_cmp(&rb.loss.unwrap_or(0.0)))
            .then(points[a].number.cmp(&points[b].number))
    });
    for &i in ranked.iter().take(cap / 4) {
        take(i, &mut taken, &mut chosen);
    }
    // The newest, up to three quarters in all (points are in trial order).
    for i in (0..n).rev() {
        if chosen.len() >= cap * 3 / 4 {
            break;
        }
        take(i, &mut taken, &mut chosen);
    }
    // The rest: the farthest from those taken, among a pool spread over the older trials.
    let left: Vec<usize> = (0..n).filter(|&i| !taken[i]).collect();
    let pool: Vec<usize> = if left.len() <= FILL_POOL {
        left
    } else {
        (0..FILL_POOL)
            .map(|k| left[k * left.len() / FILL_POOL])
            .collect()
    };
    let dist =
        |a: &[f64], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum() };
    let mut nearest: Vec<f64> = pool
        .iter()
        .map(|&i| {
            chosen
                .iter()
                .map(|&c| dist(&points[i].x, &points[c].x))
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    while chosen.len() < cap {
        let Some(k) = (0..pool.len())
            .filter(|&k| !taken[pool[k]])
            .max_by(|&a, &b| nearest[a].total_cmp(&nearest[b]).then(b.cmp(&a)))
        else {
            break;
        };
        let i = pool[k];
        take(i, &mut taken, &mut chosen);
        for (m, &j) in pool.iter().enumerate() {
            nearest[m] = nearest[m].min(dist(&points[j].x, &points[i].x));
        }
    }
    chosen.sort_unstable();
    chosen
}

impl Sampler for GpSampler {
    fn propose(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Proposal> {
        let current = i64::try_from(seed_key).ok();
        let relative = if self.n_complete >= self.settings.n_startup_trials {
            self.propose_relative(fixed, current, seed_key)
                .unwrap_or_default()
        } else {
            Relative::new()
        };
        let mut params = fixed.clone();
        for p in &space.params {
            if params.contains_key(&p.name) {
                continue;
            }
            let v = match relative.get(&p.name) {
                Some((d, v)) if d.compatible(&p.dist).is_ok() && p.dist.contains(v) => v.clone(),
                _ => self.suggest(&p.name, &p.dist, seed_key).ok()?,
            };
            params.insert(p.name.clone(), v);
        }
        let mut relative = relative;
        relative.retain(|n, _| !params.contains_key(n));
        Some(Proposal { params, relative })
    }

    fn suggest(
        &mut self,
        name: &str,
        dist: &Distribution,
        seed_key: u64,
    ) -> Result<ParamValue, String> {
        dist.check()
            .map_err(|why| format!("param `{name}`: {why}"))?;
        self.random.suggest(name, dist, seed_key)
    }

    fn observe(&mut self, number: i64, params: &Params) {
        if !self.finished.contains(&number) {
            self.running.insert(number, params.clone());
        }
    }

    fn tell(&mut self, record: &TrialRecord) {
        let number = record.number;
        if matches!(record.state, TrialState::Running | TrialState::Waiting) {
            self.finished.remove(&number);
            self.running.insert(number, record.params.clone());
            return;
        }
        self.running.remove(&number);
        if !self.finished.insert(number) {
            return;
        }
        let violated = record.constraints.iter().any(|c| *c > 0.0);
        let loss = match record.state {
            TrialState::Complete if record.values.len() == 1 => {
                let v = record.values[0];
                let l = match self.direction {
                    Direction::Minimize => v,
                    Direction::Maximize => -v,
                };
                Some(if l.is_nan() { f64::INFINITY } else { l })
            }
            TrialState::Fail if violated => None,
            _ => return,
        };
        if loss.is_some() {
            self.n_complete += 1;
            let d = &record.distributions;
            match &mut self.intersection {
                None => self.intersection = Some(d.clone()),
                Some(space) => space.retain(|name, dist| d.get(name) == Some(dist)),
            }
        }
        let row = Row {
            params: self.names.compact(&record.params),
            loss,
            constraints: record.constraints.clone(),
        };
        self.rows.insert(number, row);
    }
}
