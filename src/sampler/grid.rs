//! The grid sampler: every point of the cartesian product of the params' grids, once, as
//! Optuna's `GridSampler`.
//!
//! The grid learns which points the study already holds through [`Sampler::observe`], so after
//! a restart (or a manual `enqueue_trial`) it does not propose a point twice.
//!
//! A grid is a static space: it searches `[params]` only. An objective that suggests a name
//! outside it is refused with a message that says so, as Optuna's `GridSampler` refuses a
//! param its grid does not have.

use super::{validate, Proposal, Sampler};
use crate::study::space::grid_points;
use crate::study::{Distribution, ParamValue, Params, SearchSpace, TrialRecord, MAX_GRID_POINTS};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Exhaustive search over the cartesian product of every param's grid, as Optuna's
/// `GridSampler`, in a seeded random order so that a sweep cut short still covers the space
/// evenly rather than only its first corner.
pub struct GridSampler {
    /// Per param, in `space.params` order: name, distribution and number of grid values.
    /// Point ids are mixed-radix numbers with the first param as the most significant digit.
    axes: Vec<(String, Distribution, u64)>,
    /// Visiting order of point ids.
    order: Vec<u32>,
    /// Every id before `cursor` in `order` is known to be taken, so sampling is amortized O(1).
    cursor: usize,
    /// Bitset over point ids.
    taken: Vec<u64>,
}

impl GridSampler {
    pub fn new(space: &SearchSpace, seed: Option<u64>) -> Result<Self, String> {
        validate(space)?;
        if space.params.is_empty() {
            return Err(
                "the grid sampler searches a static space: define the grid in [params] \
                        (it cannot sample the params an objective suggests as it runs)"
                    .into(),
            );
        }
        let lens = space.grid_lens().map_err(|continuous| {
            let name = continuous.first().map_or("", |&i| space.params[i].name.as_str());
            format!(
                "grid sampler: param `{name}` is continuous; give it a `step` or use the random sampler"
            )
        })?;
        let total = grid_points(&lens);
        if total > MAX_GRID_POINTS {
            return Err(format!(
                "grid sampler: the grid has more than {MAX_GRID_POINTS} points"
            ));
        }
        let axes: Vec<(String, Distribution, u64)> = space
            .params
            .iter()
            .zip(lens)
            .map(|(p, len)| (p.name.clone(), p.dist.clone(), len))
            .collect();
        let mut order: Vec<u32> = (0..total as u32).collect();
        let mut rng = match seed {
            Some(s) => ChaCha8Rng::seed_from_u64(s),
            None => ChaCha8Rng::from_entropy(),
        };
        order.shuffle(&mut rng);
        Ok(GridSampler {
            axes,
            order,
            cursor: 0,
            taken: vec![0; (total as usize).div_ceil(64)],
        })
    }

    fn is_taken(&self, id: u32) -> bool {
        self.taken[id as usize / 64] & (1 << (id % 64)) != 0
    }

    fn take(&mut self, id: u32) {
        self.taken[id as usize / 64] |= 1 << (id % 64);
    }

    /// The point id of `params`, or `None` if any param is missing or off the grid.
    fn point_id(&self, params: &Params) -> Option<u32> {
        let mut id: u64 = 0;
        for (name, dist, len) in &self.axes {
            let v = params.get(name)?;
            if !dist.contains(v) {
                return None;
            }
            let k = match (dist, v) {
                // Through the index rather than float equality, so 0.30000000000000004 and
                // 0.3 name the same point.
                (Distribution::Float { low, step, .. }, ParamValue::Float(x)) => {
                    ((x - low) / step.unwrap_or(1.0)).round() as u64
                }
                (Distribution::Int { low, step, .. }, ParamValue::Int(i)) => {
                    ((*i as i128 - *low as i128) / *step as i128) as u64
                }
                (Distribution::Categorical { .. }, ParamValue::Choice(c)) => *c as u64,
                _ => return None,
            };
            if k >= *len {
                return None;
            }
            id = id * len + k;
        }
        Some(id as u32)
    }

    fn point(&self, mut id: u64) -> Params {
        let mut out = Params::new();
        for (name, dist, len) in self.axes.iter().rev() {
            let k = id % len;
            id /= len;
            let v = match (dist.grid_value(k), dist) {
                // grid_value can overshoot high by an ulp; keep the proposal in domain.
                (Some(ParamValue::Float(x)), Distribution::Float { high, .. }) => {
                    ParamValue::Float(x.min(*high))
                }
                (Some(v), _) => v,
                (None, _) => unreachable!("k < grid_len"),
            };
            out.insert(name.clone(), v);
        }
        out
    }
}

impl Sampler for GridSampler {
    fn propose(
        &mut self,
        _space: &SearchSpace,
        fixed: &Params,
        _seed_key: u64,
    ) -> Option<Proposal> {
        // A trial whose every axis is given (an enqueued point, a retry) takes no new point:
        // it is marked taken when it is observed.
        let params = if self
            .axes
            .iter()
            .all(|(name, _, _)| fixed.contains_key(name))
        {
            fixed.clone()
        } else {
            while self.cursor < self.order.len() && self.is_taken(self.order[self.cursor]) {
                self.cursor += 1;
            }
            let id = *self.order.get(self.cursor)?;
            self.take(id);
            self.cursor += 1;
            let mut out = self.point(id as u64);
            // An enqueued trial's own values win, as in Optuna where fixed params bypass the
            // sampler.
            out.extend(fixed.iter().map(|(k, v)| (k.clone(), v.clone())));
            out
        };
        Some(Proposal {
            params,
            relative: Default::default(),
        })
    }

    fn suggest(
        &mut self,
        name: &str,
        _dist: &Distribution,
        _seed_key: u64,
    ) -> Result<ParamValue, String> {
        Err(format!(
            "the grid sampler searches the static [params] space only, and `{name}` is not in \
             it: add [params.{name}] to the config, or use sampler = \"tpe\" or \"random\" for \
             a search space the objective defines as it runs"
        ))
    }

    fn tell(&mut self, record: &TrialRecord) {
        self.observe(record.number, &record.params);
    }

    fn observe(&mut self, _number: i64, params: &Params) {
        if let Some(id) = self.point_id(params) {
            self.take(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use crate::sampler::testkit::float_of;
    use crate::study::space::test_util::{cat, float, int, spec};

    fn grid_space() -> SearchSpace {
        SearchSpace {
            params: vec![
                spec("x", float(0.0, 0.3, Some(0.1), false)),
                spec("n", int(2, 6, 2, false)),
                spec("opt", cat(2)),
            ],
        }
    }

    #[test]
    fn grid_visits_every_point_once_then_stops() {
        let space = grid_space();
        let mut g = GridSampler::new(&space, Some(5)).unwrap();
        let mut seen = Vec::new();
        while let Some(p) = g.sample(&space, &Params::new(), 0) {
            for spec in &space.params {
                assert!(spec.dist.contains(&p[&spec.name]), "{p:?}");
            }
            seen.push(g.point_id(&p).unwrap());
        }
        assert_eq!(seen.len(), 4 * 3 * 2);
        assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 24);
        assert_eq!(g.sample(&space, &Params::new(), 0), None);
    }

    #[test]
    fn grid_skips_observed_points() {
        let space = grid_space();
        let mut p = Params::new();
        // Not exactly the grid's 0.2: observation goes through the grid index.
        p.insert("x".into(), ParamValue::Float(0.1 + 0.2 - 0.1));
        p.insert("n".into(), ParamValue::Int(4));
        p.insert("opt".into(), ParamValue::Choice(1));
        let mut g = GridSampler::new(&space, Some(5)).unwrap();
        g.observe(0, &p);
        let mut n = 0;
        while let Some(q) = g.sample(&space, &Params::new(), 0) {
            assert_ne!(g.point_id(&q), g.point_id(&p));
            n += 1;
        }
        assert_eq!(n, 23);
    }

    #[test]
    fn grid_ignores_partial_and_off_grid_observations() {
        let space = grid_space();
        let mut g = GridSampler::new(&space, Some(9)).unwrap();
        let mut partial = Params::new();
        partial.insert("x".into(), ParamValue::Float(0.1));
        partial.insert("n".into(), ParamValue::Int(2));
        g.observe(0, &partial);
        let mut off = partial.clone();
        off.insert("opt".into(), ParamValue::Choice(0));
        off.insert("x".into(), ParamValue::Float(0.15));
        g.observe(0, &off);
        off.insert("x".into(), ParamValue::Float(0.1));
        off.insert("n".into(), ParamValue::Int(3));
        g.observe(0, &off);
        off.insert("n".into(), ParamValue::Float(2.0));
        g.observe(0, &off);
        let mut n = 0;
        while g.sample(&space, &Params::new(), 0).is_some() {
            n += 1;
        }
        assert_eq!(n, 24);
    }

    #[test]
    fn grid_seed_changes_order_not_set() {
        let space = grid_space();
        let run = |seed| {
            let mut g = GridSampler::new(&space, Some(seed)).unwrap();
            let mut ids = Vec::new();
            while let Some(p) = g.sample(&space, &Params::new(), 0) {
                ids.push(g.point_id(&p).unwrap());
            }
            ids
        };
        let (a, b) = (run(1), run(2));
        assert_eq!(a, run(1));
        assert_ne!(a, b);
        let set = |v: &[u32]| v.iter().copied().collect::<BTreeSet<_>>();
        assert_eq!(set(&a), set(&b));
    }

    #[test]
    fn grid_fixed_params_override_coordinates() {
        let space = grid_space();
        let mut g = GridSampler::new(&space, Some(4)).unwrap();
        let mut fixed = Params::new();
        fixed.insert("n".into(), ParamValue::Int(100));
        let mut n = 0;
        while let Some(p) = g.sample(&space, &fixed, 0) {
            assert_eq!(p["n"], ParamValue::Int(100));
            assert_eq!(p.len(), 3);
            n += 1;
        }
        assert_eq!(n, 24);
    }

    #[test]
    fn grid_stops_at_an_off_grid_high() {
        let space = SearchSpace {
            params: vec![spec("x", float(0.0, 1.0, Some(0.4), false))],
        };
        let mut g = GridSampler::new(&space, Some(0)).unwrap();
        let mut xs = Vec::new();
        while let Some(p) = g.sample(&space, &Params::new(), 0) {
            assert!(space.params[0].dist.contains(&p["x"]), "{p:?}");
            xs.push((float_of(&p, "x") * 10.0).round() as u64);
        }
        xs.sort();
        assert_eq!(xs, [0, 4, 8]);
    }

    #[test]
    fn grid_rejects_continuous_and_huge_spaces() {
        let cont = SearchSpace {
            params: vec![
                spec("n", int(0, 3, 1, false)),
                spec("lr", float(1e-4, 1e-1, None, true)),
            ],
        };
        let err = GridSampler::new(&cont, Some(0)).err().unwrap();
        assert!(err.contains("`lr`"), "{err}");
        let huge = SearchSpace {
            params: vec![
                spec("a", int(1, 1000, 1, false)),
                spec("b", int(1, 1001, 1, false)),
            ],
        };
        assert!(GridSampler::new(&huge, Some(0)).is_err());
        let tiny_step = SearchSpace {
            params: vec![spec("x", float(0.0, 1.0, Some(1e-300), false))],
        };
        assert!(GridSampler::new(&tiny_step, Some(0)).is_err());
    }
}
