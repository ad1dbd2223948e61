//! NSGA-II, after Optuna 5.0's `NSGAIISampler` with its defaults (`samplers/nsgaii/`,
//! `samplers/_ga/_base.py`): a genetic algorithm whose individuals are the study's trials.
//!
//! - **generations**: a new trial belongs to the newest generation that holds at least one
//!   individual, or the next one once that generation has `population_size` of them (Optuna's
//!   `get_trial_generation`); trials of generation 0 are drawn at random ([`RandomSampler`]'s
//!   proposals with the same seed).
//! - **parents** of generation `g`: the elite of generation `g - 1` together with *its*
//!   parents, chosen once (when the first trial of `g` is proposed) and then kept, as Optuna
//!   caches them: ranked by non-domination (with constraints: feasible trials first, infeasible
//!   ones behind them by total violation), whole ranks taken while they fit in
//!   `population_size`, the rank that does not fit cut by crowding distance (Optuna's
//!   `_calc_crowding_distance`, with its sort order and tie-breaks).
//! - **a child**: with probability `crossover_prob`, two parents chosen by binary tournament
//!   (the first of two random parents if it dominates the second, else the second; the second
//!   parent is drawn from the others) and crossed by uniform crossover (each param from the
//!   second parent with probability `swapping_prob`, Optuna's default crossover, categorical or
//!   not); otherwise a copy of a random parent. Then each param is mutated with probability
//!   `mutation_prob` (default `1 / number of params`): with Optuna's default mutation (none) a
//!   mutated param is drawn anew at random.
//! - **constraints**: with any constraint in the parents, dominance is Optuna's constrained
//!   dominance: a feasible trial dominates an infeasible one, two infeasible ones compare by
//!   total violation. A trial with no values (not COMPLETE) never dominates and is dominated by
//!   every COMPLETE one.
//! - the params modelled are those every parent holds with the same distribution (in the current
//!   domain, for `[params]`) and that have more than one legal value, in a define-by-run study
//!   what the objectives suggested too (those values are handed out when the objective suggests
//!   the name); the others are drawn at random.
//! - a crossed-over value is the parent's, bit for bit. Optuna crosses numbers over in its
//!   transformed space and back, so its child can differ from the parent in the last bits (the
//!   `exp` of the `log` of a log param, a stepped float re-rounded to its grid, a float equal to
//!   `high` moved to the float below it): not a difference in the distribution.
//!
//! Checked against Optuna's own code (`nsga2/optuna_golden.py`): the same generations and parent
//! populations trial for trial in replayed Optuna studies, and children of fixed parents made of
//! the same parents' values as often (tournament, crossover or copy, mutation).
//!
//! Deliberate differences from Optuna:
//! - The params modelled are intersected over the parents, not over every COMPLETE trial of the
//!   study (Optuna's `IntersectionSearchSpace`). For a static space this is the same; in a
//!   define-by-run study a param every parent holds is crossed over even if an older trial (one
//!   that took another branch of the objective) lacks it, where Optuna would draw it at random for
//!   the rest of the study.
//! - FAIL trials with a violated constraint (out of memory even alone on the device) are
//!   individuals too: infeasible, without values, so they rank behind every feasible trial and
//!   lose every tournament against a COMPLETE one. Optuna's population is COMPLETE trials only;
//!   keeping these makes NSGA-II's elite see what sweepd learnt about memory.
//! - Generations and parent populations live in memory, not in Optuna's
//!   `NSGAIISampler:generation` / `NSGAIISampler:parent:` attributes: a restarted daemon
//!   rebuilds them from the history in trial order (the generation a trial gets is the one the
//!   rule gives when it is observed or, for trials it never observed, told).
//! - Randomness is the ChaCha8 stream of (seed, trial number), as for the other samplers.

use super::{Proposal, RandomSampler, Relative, Sampler};
use crate::config::SamplerConfig;
use crate::study::pareto::{self, dominates};
use crate::study::{
    Direction, Distribution, Dists, ParamValue, Params, SearchSpace, TrialRecord, TrialState,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap};

/// Mixed into the seed so that NSGA-II's choices do not reuse the random sampler's stream.
const STREAM_SALT: u64 = 0x9E37_79B9_7F4A_7C15;

/// A trial NSGA-II selects from.
#[derive(Debug, Clone)]
struct Individual {
    params: Params,
    /// Each param's distribution as the trial recorded it (`[params]` or what its objective
    /// suggested).
    dists: Dists,
    /// The values as losses; `None` for a FAIL trial kept as infeasible.
    losses: Option<Vec<f64>>,
    /// The raw values (crowding distance is computed on them, as Optuna does).
    values: Vec<f64>,
    constraints: Vec<f64>,
}

impl Individual {
    fn penalty(&self) -> f64 {
        pareto::violation(&self.constraints)
    }
}

/// Optuna's `NSGAIISampler` (see the module docs).
pub struct Nsga2Sampler {
    directions: Vec<Direction>,
    settings: SamplerConfig,
    random: RandomSampler,
    /// Used only when unseeded.
    entropy: ChaCha8Rng,
    /// By trial number.
    individuals: BTreeMap<i64, Individual>,
    /// The generation of every trial that has one, by trial number.
    generation: HashMap<i64, u32>,
    /// Parent populations (trial numbers, in trial order), chosen once per generation.
    parents: HashMap<u32, Vec<i64>>,
}

impl Nsga2Sampler {
    pub fn new(directions: &[Direction], settings: SamplerConfig) -> Nsga2Sampler {
        Nsga2Sampler {
            directions: directions.to_vec(),
            random: RandomSampler::new(settings.seed),
            settings,
            entropy: ChaCha8Rng::from_entropy(),
            individuals: BTreeMap::new(),
            generation: HashMap::new(),
            parents: HashMap::new(),
        }
    }

    fn population_size(&self) -> usize {
        self.settings.population_size.max(2)
    }

    /// Optuna's `get_trial_generation` for a new trial: the newest generation, or the next one
    /// once it is full.
    fn current_generation(&self) -> u32 {
        let (mut max, mut count) = (0u32, 0usize);
        for n in self.individuals.keys() {
            let Some(&g) = self.generation.get(n) else {
                continue;
            };
            if g > max {
                (max, count) = (g, 1);
            } else if g == max {
                count += 1;
            }
        }
        if count < self.population_size() {
            max
        } else {
            max + 1
        }
    }

    /// The individuals of generation `g`, in trial order.
    fn population(&self, g: u32) -> Vec<i64> {
        self.individuals
            .keys()
            .filter(|n| self.generation.get(n) == Some(&g))
            .copied()
            .collect()
    }

    /// The parents of generation `g`, chosen (and kept) for every generation up to it that has
    /// none yet.
    fn parents_of(&mut self, g: u32) -> Vec<i64> {
        if g == 0 {
            return Vec::new();
        }
        let first = (1..=g)
            .find(|k| !self.parents.contains_key(k))
            .unwrap_or(g + 1);
        for k in first..=g {
            let mut pool = self.population(k - 1);
            pool.extend(self.parents.get(&(k - 1)).cloned().unwrap_or_default());
            let mut elite = self.select_elite(&pool);
            elite.sort_unstable();
            self.parents.insert(k, elite);
        }
        self.parents[&g].clone()
    }

    /// Optuna's `NSGAIIElitePopulationSelectionStrategy`: the best `population_size` of `pool`.
    fn select_elite(&self, pool: &[i64]) -> Vec<i64> {
        let inds: Vec<&Individual> = pool.iter().map(|n| &self.individuals[n]).collect();
        let constrained = inds.iter().any(|i| !i.constraints.is_empty());
        let unknown = vec![f64::INFINITY; self.directions.len()];
        let rows: Vec<&[f64]> = inds
            .iter()
            .map(|i| i.losses.as_deref().unwrap_or(&unknown))
            .collect();
        // FAIL individuals carry a violated constraint: the study is then a constrained one,
        // and they rank by violation alone, behind every feasible trial.
        let penalty: Vec<f64> = inds.iter().map(|i| i.penalty()).collect();
        let ranks =
            pareto::fast_nondomination_ranks(&rows, constrained.then_some(&penalty[..]), None);
        let max_rank = ranks.iter().copied().max().unwrap_or(0);
        let mut by_rank: Vec<Vec<usize>> = vec![Vec::new(); max_rank + 1];
        for (k, &r) in ranks.iter().enumerate() {
            by_rank[r].push(k);
        }
        let size = self.population_size();
        let mut elite: Vec<i64> = Vec::with_capacity(size);
        for members in by_rank {
            if elite.len() + members.len() < size {
                elite.extend(members.iter().map(|&k| pool[k]));
            } else {
                let n = size - elite.len();
                let sorted = crowding_distance_sort(&members, &inds, pool);
                elite.extend(sorted[..n].iter().map(|&k| pool[k]));
                break;
            }
        }
        elite
    }

    /// Optuna's binary tournament: the first of two random candidates if it dominates the
    /// second, else the second.
    fn tournament(&self, candidates: &[i64], constrained: bool, rng: &mut ChaCha8Rng) -> i64 {
        let a = candidates[rng.gen_range(0..candidates.len())];
        let b = candidates[rng.gen_range(0..candidates.len())];
        if self.dominates(a, b, constrained) {
            a
        } else {
            b
        }
    }

    /// `_dominates` or, with constraints among the parents, `_constrained_dominates`.
    fn dominates(&self, a: i64, b: i64, constrained: bool) -> bool {
        let (x, y) = (&self.individuals[&a], &self.individuals[&b]);
        let (Some(lx), ly) = (&x.losses, &y.losses) else {
            return false;
        };
        let Some(ly) = ly else {
            return true;
        };
        if !constrained {
            return dominates(lx, ly);
        }
        match (
            pareto::feasible(&x.constraints),
            pareto::feasible(&y.constraints),
        ) {
            (true, true) => dominates(lx, ly),
            (true, false) => true,
            (false, true) => false,
            (false, false) => x.penalty() < y.penalty(),
        }
    }

    /// A child of `parents` over the modelled params `names`: crossover or a copy, then
    /// mutation (a mutated param is left out, to be drawn at random).
    fn child(&self, parents: &[i64], names: &[&str], rng: &mut ChaCha8Rng) -> Params {
        let constrained = parents
            .iter()
            .any(|n| !self.individuals[n].constraints.is_empty());
        let take = |n: i64, name: &str| self.individuals[&n].params[name].clone();
        let mut child = Params::new();
        if rng.gen::<f64>() < self.settings.crossover_prob && parents.len() >= 2 {
            let first = self.tournament(parents, constrained, rng);
            let others: Vec<i64> = parents.iter().copied().filter(|&n| n != first).collect();
            let second = self.tournament(&others, constrained, rng);
            for name in names {
                let from = if rng.gen::<f64>() >= self.settings.swapping_prob {
                    second
                } else {
                    first
                };
                child.insert((*name).to_owned(), take(from, name));
            }
        } else {
            let one = parents[rng.gen_range(0..parents.len())];
            for name in names {
                child.insert((*name).to_owned(), take(one, name));
            }
        }
        let mutation_prob = self
            .settings
            .mutation_prob
            .unwrap_or(1.0 / child.len().max(1) as f64);
        child.retain(|_, _| rng.gen::<f64>() >= mutation_prob);
        child
    }

    fn join(&mut self, number: i64, individual: Option<Individual>) {
        self.individuals.remove(&number);
        if let Some(i) = individual {
            if !self.generation.contains_key(&number) {
                let g = self.current_generation();
                self.generation.insert(number, g);
            }
            self.individuals.insert(number, i);
        }
    }
}

/// Optuna's `_crowding_distance_sort` of the pool entries `members` (indices into `pool`):
/// by crowding distance, largest first, ties in the reverse of Optuna's stable order.
fn crowding_distance_sort(members: &[usize], inds: &[&Individual], pool: &[i64]) -> Vec<usize> {
    let mut order: Vec<usize> = members.to_vec();
    let mut distance: HashMap<i64, f64> = HashMap::new();
    let m = inds
        .get(members.first().copied().unwrap_or(0))
        .map_or(0, |i| i.losses.as_ref().map_or(i.values.len(), Vec::len));
    let value = |k: usize, d: usize| inds[k].values.get(d).copied().unwrap_or(f64::INFINITY);
    for d in 0..m {
        // Stable, and from the order the previous objective left: as Python's list.sort.
        order.sort_by(|&a, &b| {
            value(a, d)
                .partial_cmp(&value(b, d))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        let (lo, hi) = (value(order[0], d), value(order[order.len() - 1], d));
        if lo == hi {
            continue;
        }
        let mut vs = vec![f64::NEG_INFINITY];
        vs.extend(order.iter().map(|&k| value(k, d)));
        vs.push(f64::INFINITY);
        let v_min = vs
            .iter()
            .copied()
            .find(|x| *x != f64::NEG_INFINITY)
            .unwrap_or(f64::INFINITY);
        let v_max = vs
            .iter()
            .rev()
            .copied()
            .find(|x| *x != f64::INFINITY)
            .unwrap_or(f64::NEG_INFINITY);
        let mut width = v_max - v_min;
        if width.is_nan() || width <= 0.0 {
            width = 1.0;
        }
        for (j, &k) in order.iter().enumerate() {
            let gap = if vs[j] == vs[j + 2] {
                0.0
            } else {
                vs[j + 2] - vs[j]
            };
            *distance.entry(pool[k]).or_default() += gap / width;
        }
    }
    let dist = |k: usize| distance.get(&pool[k]).copied().unwrap_or(0.0);
    order.sort_by(|&a, &b| {
        dist(a)
            .partial_cmp(&dist(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    order.reverse();
    order
}

impl Sampler for Nsga2Sampler {
    fn propose(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Proposal> {
        let g = self.current_generation();
        let parents = self.parents_of(g);
        if parents.is_empty() {
            return self.random.propose(space, fixed, seed_key);
        }
        let mut rng = match self.settings.seed {
            Some(seed) => {
                let mut r = ChaCha8Rng::seed_from_u64(seed ^ STREAM_SALT);
                r.set_stream(seed_key);
                r
            }
            None => ChaCha8Rng::seed_from_u64(self.entropy.gen()),
        };
        // Optuna's intersection search space over the parents: the names every parent holds
        // with the same distribution (the `[params]` space's and, in a define-by-run study, what
        // the objectives suggested), with more than one legal value, and for `[params]` names
        // a value in the current domain.
        let mut shared: Dists = self.individuals[&parents[0]].dists.clone();
        for n in &parents[1..] {
            let d = &self.individuals[n].dists;
            shared.retain(|name, dist| d.get(name) == Some(dist));
        }
        for p in &space.params {
            shared
                .entry(p.name.clone())
                .or_insert_with(|| p.dist.clone());
        }
        let names: Vec<&str> = shared
            .iter()
            .filter(|(name, dist)| !fixed.contains_key(*name) && !single_valued(dist))
            .filter(|(name, dist)| {
                let dist = space.get(name).map_or(*dist, |p| &p.dist);
                parents.iter().all(|n| {
                    self.individuals[n]
                        .params
                        .get(*name)
                        .is_some_and(|v| dist.contains(v))
                })
            })
            .map(|(name, _)| name.as_str())
            .collect();
        let child = self.child(&parents, &names, &mut rng);
        let mut out = fixed.clone();
        let mut relative = Relative::new();
        for (name, v) in child {
            if space.get(&name).is_some() {
                out.insert(name, v);
            } else {
                // Handed out when the objective suggests the name (a compatible distribution
                // that holds the value), as Optuna's `relative_params`.
                relative.insert(name.clone(), (shared[&name].clone(), v));
            }
        }
        // Mutated params, and those not modelled, are drawn at random.
        let params = self.random.propose(space, &out, seed_key)?.params;
        Some(Proposal { params, relative })
    }

    /// A param the child did not settle (mutated, or not shared by every parent): drawn at
    /// random, as Optuna's `sample_independent` for NSGA-II.
    fn suggest(
        &mut self,
        name: &str,
        dist: &Distribution,
        seed_key: u64,
    ) -> Result<ParamValue, String> {
        self.random.suggest(name, dist, seed_key)
    }

    fn observe(&mut self, number: i64, _params: &Params) {
        if !self.generation.contains_key(&number) {
            let g = self.current_generation();
            self.generation.insert(number, g);
        }
    }

    fn tell(&mut self, record: &TrialRecord) {
        let individual = match record.state {
            TrialState::Running | TrialState::Waiting => {
                self.individuals.remove(&record.number);
                self.observe(record.number, &record.params);
                return;
            }
            TrialState::Complete if record.values.len() == self.directions.len() => {
                Some(Individual {
                    params: record.params.clone(),
                    dists: record.distributions.clone(),
                    losses: Some(pareto::losses(&record.values, &self.directions)),
                    values: record.values.clone(),
                    constraints: record.constraints.clone(),
                })
            }
            // Infeasible by memory: dominated by every COMPLETE trial (see the module docs).
            TrialState::Fail if !pareto::feasible(&record.constraints) => Some(Individual {
                params: record.params.clone(),
                dists: record.distributions.clone(),
                losses: None,
                values: Vec::new(),
                constraints: record.constraints.clone(),
            }),
            _ => None,
        };
        self.join(record.number, individual);
    }
}

/// A distribution with one legal value: Optuna leaves it out of the relative search space.
fn single_valued(dist: &Distribution) -> bool {
    match *dist {
        Distribution::Float {
            low, high, step, ..
        } => low == high || step.is_some_and(|s| high - low < s),
        Distribution::Int {
            low, high, step, ..
        } => high - low < step,
        Distribution::Categorical { ref choices } => choices.len() <= 1,
    }
}

#[cfg(test)]
mod tests;
