//! Tree-structured Parzen Estimator, after Optuna 5.0's `TPESampler`, with one objective or
//! several.
//!
//! References: Watanabe 2023, "Tree-structured Parzen Estimator: Understanding Its Algorithm
//! Components and Their Roles for Better Empirical Performance", and Optuna 5.0's
//! `samplers/_tpe/{sampler,parzen_estimator,probability_distributions,_truncnorm}.py` and
//! `search_space/{intersection,group_decomposed}.py`. The tests check the Parzen estimator's log
//! density against Optuna 5.0's to 1e-9, and the optimisation scenarios on a few seeds against
//! bounds taken from Optuna 5.0 run on the same problems; `bench/sampler_bench.rs --scenarios`
//! sets them beside Optuna's over many seeds, and `bench/search_bench.py conditional` does so
//! on conditional (define-by-run) spaces.
//!
//! This file is the sampler (startup, the relative search space, proposals, what a told trial
//! becomes); the parts have their own: `model` (how one param is modelled), `split` (the history
//! and its below/above split), `multi` (the split with several objectives), `parzen` (the
//! estimators), `truncnorm` (their kernels' normal).
//!
//! The search space is discovered as the study runs, as in Optuna: a trial's params are what its
//! objective suggested (plus `[params]`, written up front), each with its own distribution, and
//! the history keeps each trial's params by name. Two ways of sampling, as Optuna's:
//! - **relative** ([`Sampler::propose`], when a trial starts): the params every relevant trial
//!   shares are drawn jointly. With `multivariate` (default with one objective) the relative
//!   search space is Optuna's `IntersectionSearchSpace(include_pruned=True)`: the names whose
//!   distribution is the same in every COMPLETE and PRUNED trial. With `group` it is Optuna's
//!   group decomposition instead: the names split into groups of params that always occur
//!   together (a branch of the objective), each group drawn jointly on its own. Params with a
//!   single legal value are left out. The values are kept for the trial and handed out when its
//!   objective suggests the name with a compatible distribution that contains the value
//!   (Optuna's `relative_params`); the `[params]` space is drawn from them where it can.
//! - **independent** ([`Sampler::suggest`]): any other param, one at a time, from the trials
//!   that have it.
//!
//! Components, with Optuna 5.0's defaults:
//! - **startup**: until `n_startup_trials` trials are COMPLETE or PRUNED, nothing is drawn
//!   jointly and every param comes from [`RandomSampler`] with the same seed, so a proposal is
//!   exactly the random sampler's.
//! - **split**: `gamma(n) = min(ceil(0.1 n), 25)` trials go "below" (good), the rest "above",
//!   where `n` counts COMPLETE and PRUNED trials. Below is filled in this order: feasible COMPLETE
//!   trials by objective (negated when maximizing), then feasible PRUNED trials by their last
//!   intermediate value (those pruned without one last), then infeasible trials by total
//!   violation. Both groups are then put in trial-number order. The estimators of a set of
//!   params are then built from the trials of each group that have all of them, as Optuna's.
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
//! - **constant liar** (default): trials that were `observe`d and not yet `tell`ed (RUNNING or
//!   WAITING, with their relative values and what they suggested so far, as Optuna's
//!   `_get_params`) go "above" without counting in `n`, so concurrent proposals avoid each
//!   other; the trial being proposed for (`seed_key`) is left out, as Optuna leaves out the
//!   current one.
//! - **constraints**: a trial with any constraint value > 0 is infeasible and ranks after every
//!   feasible trial, by total violation, so it lands "above" unless too few trials are
//!   feasible; its objective value is never used. No constraint values = feasible (as Optuna
//!   5.0's `trial.constraints`).
//! - the truncated normal: `log_ndtr` with an asymptotic series in the far left tail, the log
//!   mass of an interval computed in the left tail by symmetry, and inverse-CDF draws solved by
//!   Newton's method on `log_ndtr` from Optuna's initial guesses, as `_truncnorm.py`.
//!
//! - **several objectives** (Optuna's multi-objective TPE, `with_directions`): `gamma(n) =
//!   ceil(0.1 n)` trials go below, chosen by non-domination rank with the last rank cut by
//!   greedy hypervolume subset selection (`multi`); below's kernels all weigh 1 (Optuna 5.0),
//!   above keeps the fading weights; `multivariate` defaults to false, as Optuna's. Pruned and
//!   infeasible trials follow the feasible COMPLETE ones as with one objective.
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
//! - A trial's value for a param is modelled only where it lies in the distribution asked for
//!   now (a range that changed, or the config's): Optuna feeds values outside the range to its
//!   kernels as they are. A float with both `step` and `log` (which Optuna forbids) is modelled
//!   on the linear grid, as [`RandomSampler`] draws it; a log int with a step above 1 (also
//!   forbidden) keeps its first grid cell's lower edge at `low - min(step, low) / 2 > 0`.
//! - Ties between equal observations in the bandwidth rule are broken by trial order; Optuna
//!   leaves them to NumPy's unstable `argsort`, so which of the tied kernels gets which width
//!   is arbitrary there.
//! - Randomness is the ChaCha8 stream of (seed, trial number, param name), not NumPy's
//!   `RandomState`, so a seeded proposal differs from Optuna's while being reproducible whatever
//!   the dispatch order and whatever order the objective suggests its params in.
//! - Bounded cost: past [`HISTORY_WINDOW`] finished trials, "below" is still the best
//!   `gamma(n)` of *all* trials (read off a set kept in rank order as trials are told), but
//!   "above" keeps only the `HISTORY_WINDOW` most recently told of the rest. Optuna re-fits every trial on every ask, so its
//!   cost grows with the study; here a proposal's cost stops growing. Optuna's fading weights
//!   already give the oldest trials the least weight, so the window drops what matters least.

use super::{keyed_rng, Proposal, Relative, RELATIVE_DOMAIN};
use crate::config::SamplerConfig;
use crate::sampler::{RandomSampler, Sampler};
use crate::study::{
    pareto, Direction, Distribution, Dists, ParamValue, Params, SearchSpace, TrialRecord,
    TrialState,
};
use model::Model;
use parzen::Estimator;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use split::{lookup, Cell, History, Rank, Row};
use std::collections::{BTreeSet, HashMap};

mod model;
mod multi;
mod parzen;
mod split;
mod truncnorm;

pub use split::HISTORY_WINDOW;

/// The stream of a param's independent TPE draw (the random sampler's is another).
const INDEPENDENT_DOMAIN: u8 = 2;

/// Param names as small ids, so that a history row is a short sorted list of (id, value).
#[derive(Default)]
struct Names {
    ids: HashMap<String, u32>,
}

impl Names {
    fn id(&mut self, name: &str) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(name.to_owned()).or_insert(next)
    }

    fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    fn row(&mut self, params: &Params) -> Row {
        let mut cells: Vec<Cell> = params
            .iter()
            .map(|(name, v)| (self.id(name), v.clone()))
            .collect();
        cells.sort_by_key(|c| c.0);
        cells.into_boxed_slice()
    }
}

/// Optuna's `_SearchSpaceGroup.add_distributions`: the groups of names that always occur
/// together, refined by one more trial's names. A name keeps the first distribution seen.
fn add_to_groups(groups: &mut Vec<Dists>, dists: &Dists) {
    let mut left: BTreeSet<&String> = dists.keys().collect();
    let mut next = Vec::with_capacity(groups.len() * 2 + 1);
    for space in groups.iter() {
        let (shared, alone): (Dists, Dists) = space
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .partition(|(k, _)| left.contains(k));
        next.push(shared);
        next.push(alone);
        left.retain(|k| !space.contains_key(*k));
    }
    next.push(
        left.into_iter()
            .map(|k| (k.clone(), dists[k].clone()))
            .collect(),
    );
    next.retain(|g| !g.is_empty());
    *groups = next;
}

/// The TPE sampler. History is kept here, one compact row of params per trial.
pub struct TpeSampler {
    /// One per objective: several make it Optuna's multi-objective TPE.
    directions: Vec<Direction>,
    /// `[sampler]`, with `seed` the one resolved for this study (`[sampler]`, else `[study]`).
    settings: SamplerConfig,
    names: Names,
    history: History,
    /// Optuna's intersection search space over the COMPLETE and PRUNED trials told so far
    /// (`None` before the first).
    intersection: Option<Dists>,
    /// Optuna's group decomposition of the same trials' params.
    groups: Vec<Dists>,
    /// Startup proposals.
    random: RandomSampler,
    /// Used only when unseeded.
    entropy: ChaCha8Rng,
}

impl TpeSampler {
    pub fn new(direction: Direction, settings: SamplerConfig) -> TpeSampler {
        TpeSampler::with_directions(&[direction], settings)
    }

    /// A TPE sampler for a study with these objectives (several: multi-objective TPE).
    pub fn with_directions(directions: &[Direction], settings: SamplerConfig) -> TpeSampler {
        TpeSampler {
            directions: directions.to_vec(),
            random: RandomSampler::new(settings.seed),
            settings,
            names: Names::default(),
            history: History::default(),
            intersection: None,
            groups: Vec::new(),
            entropy: ChaCha8Rng::from_entropy(),
        }
    }

    fn loss(&self, value: f64) -> f64 {
        let l = match self.directions[0] {
            Direction::Minimize => value,
            Direction::Maximize => -value,
        };
        if l.is_nan() {
            f64::INFINITY
        } else {
            l
        }
    }

    fn is_multi_objective(&self) -> bool {
        self.directions.len() > 1
    }

    /// Optuna's default: multivariate with one objective, independent with several.
    fn multivariate(&self) -> bool {
        self.settings
            .multivariate
            .unwrap_or(!self.is_multi_objective())
    }

    /// The history split for a proposal for trial `current` (see [`History::split`]).
    fn split(&self, current: Option<i64>) -> (Vec<&[Cell]>, Vec<&[Cell]>) {
        if self.is_multi_objective() {
            self.history
                .split_multi(current, self.settings.constant_liar)
        } else {
            self.history.split(current, self.settings.constant_liar)
        }
    }

    fn in_startup(&self) -> bool {
        self.history.n_counted() < self.settings.n_startup_trials
    }

    fn rng(&mut self, seed_key: u64, name: &str, domain: u8) -> ChaCha8Rng {
        match self.settings.seed {
            Some(seed) => keyed_rng(seed, seed_key, name, domain),
            None => ChaCha8Rng::seed_from_u64(self.entropy.gen()),
        }
    }

    /// The relative search space (see the module docs), as the groups drawn jointly, each in
    /// name order. Empty without `multivariate`, and until a trial is told.
    fn relative_space(&self) -> Vec<Vec<(String, Distribution)>> {
        if !self.multivariate() {
            return Vec::new();
        }
        let groups: Vec<&Dists> = if self.settings.group {
            self.groups.iter().collect()
        } else {
            self.intersection.iter().collect()
        };
        groups
            .into_iter()
            .map(|g| {
                g.iter()
                    .filter(|(_, d)| d.single().is_none())
                    .map(|(n, d)| (n.clone(), d.clone()))
                    .collect::<Vec<_>>()
            })
            .filter(|g| !g.is_empty())
            .collect()
    }

    /// History rows as the coordinates of `space`, NaN where the trial lacks the param or its
    /// value does not fit (the estimators skip rows with any NaN, as Optuna's use only the
    /// trials that have every param of the space).
    fn project(&self, space: &[(String, Model)], rows: &[&[Cell]]) -> Vec<Box<[f64]>> {
        let ids: Vec<Option<u32>> = space.iter().map(|(n, _)| self.names.get(n)).collect();
        rows.iter()
            .map(|row| {
                space
                    .iter()
                    .zip(&ids)
                    .map(|((_, m), id)| {
                        id.and_then(|id| lookup(row, id))
                            .map_or(f64::NAN, |v| m.coord(v))
                    })
                    .collect()
            })
            .collect()
    }

    /// The estimators `l(x)` (below) and `g(x)` (above) of the params `space` jointly, from
    /// the history split for trial `current`. Every param must be modelled.
    fn estimators(
        &self,
        space: &[(String, Model)],
        current: Option<i64>,
    ) -> (Estimator, Estimator) {
        let (below, above) = self.split(current);
        let (below, above) = (self.project(space, &below), self.project(space, &above));
        let below: Vec<&[f64]> = below.iter().map(|r| &r[..]).collect();
        let above: Vec<&[f64]> = above.iter().map(|r| &r[..]).collect();
        let models: Vec<&Model> = space.iter().map(|(_, m)| m).collect();
        let dims: Vec<usize> = (0..space.len()).collect();
        let l = Estimator::weighted(&models, &dims, &below, self.is_multi_objective());
        let g = Estimator::new(&models, &dims, &above);
        (l, g)
    }

    /// One TPE proposal for the params `space` jointly, from the history split for trial
    /// `current`. Every param must be modelled (not single-valued, not invalid).
    fn propose_joint(
        &self,
        space: &[(String, Model)],
        current: Option<i64>,
        rng: &mut ChaCha8Rng,
    ) -> Vec<ParamValue> {
        let models: Vec<&Model> = space.iter().map(|(_, m)| m).collect();
        let (l, g) = self.estimators(space, current);
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
        let d = space.len();
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

/// History rows as coordinates (see `TpeSampler::project`).
#[cfg(test)]
type Coords = Vec<Box<[f64]>>;

/// What the tests of the parts look at: the models of a space, and the history split projected
/// on it.
#[cfg(test)]
impl TpeSampler {
    pub(in crate::sampler::tpe) fn models_of(space: &SearchSpace) -> Vec<(String, Model)> {
        space
            .params
            .iter()
            .map(|p| (p.name.clone(), Model::new(&p.dist)))
            .collect()
    }

    /// `params` as the coordinates of `space`.
    pub(super) fn coords(space: &SearchSpace, params: &Params) -> Box<[f64]> {
        Self::models_of(space)
            .iter()
            .map(|(n, m)| params.get(n).map_or(f64::NAN, |v| m.coord(v)))
            .collect()
    }

    /// The split for trial `current`, projected on `space`.
    pub(super) fn split_coords(
        &self,
        space: &SearchSpace,
        current: Option<i64>,
    ) -> (Coords, Coords) {
        let models = Self::models_of(space);
        let (below, above) = self.history.split(current, self.settings.constant_liar);
        (self.project(&models, &below), self.project(&models, &above))
    }
}

impl Sampler for TpeSampler {
    fn propose(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Proposal> {
        let current = i64::try_from(seed_key).ok();
        let mut relative = Relative::new();
        if !self.in_startup() {
            let mut rng = self.rng(seed_key, "", RELATIVE_DOMAIN);
            for group in self.relative_space() {
                let free: Vec<(String, Distribution, Model)> = group
                    .into_iter()
                    .filter(|(n, _)| !fixed.contains_key(n))
                    .map(|(n, d)| {
                        let m = Model::new(&d);
                        (n, d, m)
                    })
                    .filter(|(_, _, m)| matches!(m, Model::Numeric(_) | Model::Categorical { .. }))
                    .collect();
                if free.is_empty() {
                    continue;
                }
                let joint: Vec<(String, Model)> = free
                    .iter()
                    .map(|(n, _, m)| (n.clone(), m.clone()))
                    .collect();
                let values = self.propose_joint(&joint, current, &mut rng);
                for ((n, d, _), v) in free.into_iter().zip(values) {
                    relative.insert(n, (d, v));
                }
            }
        }
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
        if let Some(v) = dist.single() {
            return Ok(v);
        }
        if self.in_startup() {
            return self.random.suggest(name, dist, seed_key);
        }
        let m = Model::new(dist);
        match &m {
            Model::Single(v) => return Ok(v.clone()),
            // Only a distribution `check` passes but too fine to model (a float step of 1e-300).
            Model::Invalid => return self.random.suggest(name, dist, seed_key),
            _ => {}
        }
        let mut rng = self.rng(seed_key, name, INDEPENDENT_DOMAIN);
        let values = self.propose_joint(
            &[(name.to_owned(), m)],
            i64::try_from(seed_key).ok(),
            &mut rng,
        );
        Ok(values.into_iter().next().expect("one value per param"))
    }

    fn observe(&mut self, number: i64, params: &Params) {
        if self.history.is_finished(number) {
            return;
        }
        let row = self.names.row(params);
        self.history.run(number, row);
    }

    fn tell(&mut self, record: &TrialRecord) {
        let number = record.number;
        if matches!(record.state, TrialState::Running | TrialState::Waiting) {
            self.history.forget(number);
            self.observe(number, &record.params);
            return;
        }
        if matches!(record.state, TrialState::Complete | TrialState::Pruned) {
            let d = &record.distributions;
            match &mut self.intersection {
                None => self.intersection = Some(d.clone()),
                Some(space) => space.retain(|name, dist| d.get(name) == Some(dist)),
            }
            add_to_groups(&mut self.groups, d);
        }
        // Optuna: a trial is feasible iff every constraint is <= 0 (NaN counts as feasible).
        let violation: f64 = record.constraints.iter().filter(|&&c| c > 0.0).sum();
        let counted = matches!(record.state, TrialState::Complete | TrialState::Pruned);
        let rank = if violation > 0.0 {
            Some(Rank::Infeasible { violation, counted })
        } else {
            match record.state {
                // A COMPLETE trial of another count of values (written by another tool) is
                // not ranked.
                TrialState::Complete if record.values.len() != self.directions.len() => None,
                TrialState::Complete if self.is_multi_objective() => {
                    let losses = pareto::losses(&record.values, &self.directions);
                    // A NaN (stored by another writer) ranks as the worst, as with one objective.
                    let losses = losses
                        .into_iter()
                        .map(|l| if l.is_nan() { f64::INFINITY } else { l })
                        .collect();
                    Some(Rank::Front(losses))
                }
                TrialState::Complete => record.value().map(|v| Rank::Complete(self.loss(v))),
                TrialState::Pruned => Some(Rank::Pruned(record.value().map(|v| self.loss(v)))),
                _ => None,
            }
        };
        let ranked = rank.map(|rank| (rank, self.names.row(&record.params)));
        self.history.finish(number, ranked);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::testkit::*;
    use crate::study::space::test_util::{cat, float, int, spec};

    #[test]
    fn values_stay_in_domain() {
        let space = mixed_space();
        for multivariate in [true, false] {
            let mut s = TpeSampler::new(
                Direction::Minimize,
                SamplerConfig {
                    multivariate: Some(multivariate),
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
        let mut tpe = TpeSampler::new(direction, seeded(seed));
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
        let mut min = TpeSampler::new(Direction::Minimize, seeded(3));
        let mut max = TpeSampler::new(Direction::Maximize, seeded(3));
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
            let settings = SamplerConfig {
                multivariate: Some(multivariate),
                ..seeded(5)
            };
            let mut s = TpeSampler::new(Direction::Minimize, settings);
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
            let mut s = TpeSampler::new(Direction::Minimize, seeded(seed));
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
        let mut s = TpeSampler::new(Direction::Minimize, seeded(3));
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
        // Over seeds 0..20 this port puts 25 to 27 of these 50 at the optimum (so did it before
        // draws were keyed by param name); the random sampler about 5.
        let at_opt = ps[60..].iter().filter(|p| f_of(p, "n") == 14.0).count();
        assert!(at_opt >= 20, "{at_opt}/50 at the optimum");
    }

    /// Mean pairwise distance of 4 consecutive proposals made while 4 trials run at the best x.
    fn spread(constant_liar: bool, seed: u64) -> f64 {
        let space = x_space();
        let settings = SamplerConfig {
            constant_liar,
            ..seeded(seed)
        };
        let mut s = TpeSampler::new(Direction::Minimize, settings);
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

    /// Over 20 seeds, Optuna 5.0's `TPESampler(seed=s)` spreads 6.47 with the constant liar and
    /// 2.14 without; this port 6.39 and 1.85 (the one scenario `sampler_bench --scenarios`
    /// leaves to this test, whose `spread` it would otherwise copy).
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
                let mut s = TpeSampler::new(Direction::Minimize, seeded(seed));
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

    #[test]
    fn proposal_is_a_function_of_seed_key_and_history() {
        let space = mixed_space();
        let make = || {
            let mut s = TpeSampler::new(Direction::Minimize, seeded(21));
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
        let mut other = TpeSampler::new(Direction::Minimize, seeded(22));
        run(&mut other, &space, 0, 15, &mixed_objective);
        // Same keys, other seed: its history differs too, but the point is that it varies.
        assert_ne!(other.sample(&space, &none, 100), pa[0]);
        // Unseeded still works and varies.
        let mut u = TpeSampler::new(Direction::Minimize, SamplerConfig::default());
        run(&mut u, &space, 0, 12, &mixed_objective);
        assert_ne!(u.sample(&space, &none, 0), u.sample(&space, &none, 0));
    }

    #[test]
    fn startup_is_the_random_sampler() {
        let space = mixed_space();
        let mut s = TpeSampler::new(Direction::Minimize, seeded(4));
        let mut r = RandomSampler::new(Some(4));
        let none = Params::new();
        for k in 0..10u64 {
            let p = s.sample(&space, &none, k);
            assert_eq!(p, r.sample(&space, &none, k));
            s.tell(&record(k as i64, &p.unwrap(), k as f64, vec![]));
        }
        // Uniform: quartiles of x over many startup proposals.
        let fresh = TpeSampler::new(Direction::Minimize, seeded(4));
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
        let mut s = TpeSampler::new(Direction::Minimize, seeded(8));
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
        let c = TpeSampler::coords(&space, &odd);
        assert!(c.iter().all(|x| x.is_nan()), "{c:?}");
    }

    /// Two objectives on `x_space`'s x in [-10, 10]: (x + 10)/20 and a ZDT1-like second one
    /// whose front is x in the lower half of the domain (`g` is 1 there).
    fn two_objectives(p: &Params) -> Vec<f64> {
        let x = f_of(p, "x");
        let f1 = (x + 10.0) / 20.0;
        let g = 1.0 + 9.0 * (x.max(0.0) / 10.0);
        vec![f1, g * (1.0 - (f1 / g).sqrt())]
    }

    fn run_multi(s: &mut dyn Sampler, n: i64) -> Vec<Vec<f64>> {
        let space = x_space();
        (0..n)
            .map(|k| {
                let p = s.sample(&space, &Params::new(), k as u64).unwrap();
                s.observe(k, &p);
                let v = two_objectives(&p);
                s.tell(&TrialRecord {
                    number: k,
                    params: p,
                    state: TrialState::Complete,
                    values: v.clone(),
                    constraints: vec![],
                    distributions: Default::default(),
                });
                v
            })
            .collect()
    }

    #[test]
    fn several_objectives_split_by_rank_and_learn_the_front() {
        let d = [Direction::Minimize, Direction::Minimize];
        let mut s = TpeSampler::with_directions(&d, seeded(1));
        assert!(
            !s.multivariate(),
            "Optuna's default with several objectives"
        );
        run_multi(&mut s, 30);
        let (below, above) = s.split(None);
        // ceil(0.1 * 30) = 3 below, all on the front (x <= 0: g = 1), the rest above.
        assert_eq!((below.len(), above.len()), (3, 27));
        let id = s.names.get("x").expect("x was told");
        for row in &below {
            let x = lookup(row, id);
            assert!(
                matches!(x, Some(ParamValue::Float(x)) if *x <= 0.0),
                "{x:?} below"
            );
        }
        // Learning: after 10 random trials, most proposals land in the front's half.
        let (mut on_front, mut random_on_front) = (0, 0);
        for seed in 0..4 {
            let mut s = TpeSampler::with_directions(&d, seeded(seed));
            let v = run_multi(&mut s, 60);
            on_front += v[20..].iter().filter(|v| v[0] <= 0.5).count();
            let mut r = RandomSampler::new(Some(seed));
            let v = run_multi(&mut r, 60);
            random_on_front += v[20..].iter().filter(|v| v[0] <= 0.5).count();
        }
        assert!(
            on_front > random_on_front + 30,
            "tpe {on_front}/160 on the front's half, random {random_on_front}/160"
        );
    }

    #[test]
    fn several_objectives_ignore_trials_of_another_count() {
        let d = [Direction::Minimize, Direction::Maximize];
        let mut s = TpeSampler::with_directions(&d, seeded(2));
        s.tell(&record(0, &xp(1.0), 1.0, vec![]));
        assert_eq!(s.history.n_counted(), 0);
        s.tell(&TrialRecord {
            number: 1,
            params: xp(2.0),
            state: TrialState::Complete,
            values: vec![1.0, f64::NAN],
            constraints: vec![],
            distributions: Default::default(),
        });
        assert_eq!(s.history.n_counted(), 1);
    }

    #[test]
    fn invalid_distribution_is_refused_not_invented() {
        let space = SearchSpace {
            params: vec![
                spec("x", float(0.0, 1.0, None, false)),
                spec("bad", int(5, 1, 1, false)),
            ],
        };
        let mut s = TpeSampler::new(Direction::Minimize, seeded(1));
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
}
