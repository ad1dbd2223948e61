//! Samplers: where a new trial's parameter values come from.
//!
//! sweepd writes studies that Optuna can read, so the samplers mirror Optuna's `RandomSampler`
//! and `GridSampler`: a study started by sweepd and continued in Python (or the other way round)
//! draws from the same distributions and, for the grid, covers the same points.
//!
//! Two properties matter more here than in Optuna because sweepd is a long-running daemon that
//! may be restarted mid-study:
//! - a seeded random proposal depends only on (seed, trial number), never on how many proposals
//!   this process made before, so a restart does not replay the proposals already made and a
//!   rerun of the study reproduces its params whatever order the workers were dispatched in;
//! - the grid learns which points the study already holds through [`Sampler::observe`], so after
//!   a restart (or a manual `enqueue_trial`) it does not propose a point twice.

use crate::config::SamplerKind;
use crate::study::{Direction, Distribution, ParamValue, Params, SearchSpace, TrialRecord};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

pub mod tpe;

/// The largest grid `GridSampler` accepts: the permutation and taken-set are held in memory, and a
/// sweep larger than this is almost certainly a config mistake (a float step far too small).
pub const MAX_GRID_POINTS: u64 = 1_000_000;

/// What a sampler is told about the study, and what it proposes.
pub trait Sampler: Send {
    /// Proposes values for every param of `space` that `fixed` does not already hold, and returns
    /// the full Params (fixed ones included, unchanged). `None` = nothing left to propose
    /// (grid exhausted). `seed_key` is the trial number the proposal is for: a seeded sampler must
    /// derive its randomness for this proposal from (seed, seed_key) only, so a restarted daemon
    /// does not repeat the proposals it already made and results are reproducible regardless of
    /// dispatch order.
    fn sample(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Params>;
    /// A trial with these params exists and has not finished (RUNNING or WAITING: called on
    /// start for such trials found in the database, and for every trial claimed or created
    /// later). Grid uses it to skip points already taken; TPE's constant liar uses it.
    /// Params may be partial (a trial enqueued with some params).
    fn observe(&mut self, number: i64, params: &Params);
    /// A trial finished (called on start for every finished trial in the database, and as
    /// each trial ends). The trial may or may not have been `observe`d before.
    fn tell(&mut self, record: &TrialRecord);
}

/// Builds the sampler the config asks for, after checking that every distribution can be
/// sampled, so that a bad config fails at startup rather than as a panic mid-sweep.
pub fn build(
    kind: SamplerKind,
    space: &SearchSpace,
    seed: Option<u64>,
    direction: Direction,
    settings: &crate::config::SamplerConfig,
) -> Result<Box<dyn Sampler>, String> {
    validate(space)?;
    Ok(match kind {
        SamplerKind::Random => Box::new(RandomSampler::new(seed)),
        SamplerKind::Grid => Box::new(GridSampler::new(space, seed)?),
        SamplerKind::Tpe => Box::new(tpe::TpeSampler::new(
            space,
            direction,
            tpe::TpeSettings {
                n_startup_trials: settings.n_startup_trials,
                n_ei_candidates: settings.n_ei_candidates,
                multivariate: settings.multivariate,
                constant_liar: settings.constant_liar,
                seed,
            },
        )),
    })
}

/// Rejects distributions that would make a sampler panic or loop (empty ranges, non-positive
/// steps, log scale over non-positive values). The config loader is expected to catch these
/// too; checking again here keeps the samplers total whatever built the space.
fn validate(space: &SearchSpace) -> Result<(), String> {
    for p in &space.params {
        let err = |why: &str| Err(format!("param `{}`: {why}", p.name));
        match &p.dist {
            Distribution::Float {
                low,
                high,
                step,
                log,
            } => {
                if !low.is_finite() || !high.is_finite() || low > high {
                    return err("float bounds must be finite with low <= high");
                }
                if step.is_some_and(|s| !s.is_finite() || s <= 0.0) {
                    return err("float step must be positive");
                }
                if *log && *low <= 0.0 {
                    return err("log scale needs low > 0");
                }
            }
            Distribution::Int {
                low,
                high,
                step,
                log,
            } => {
                if low > high {
                    return err("int bounds must have low <= high");
                }
                if *step <= 0 {
                    return err("int step must be positive");
                }
                if *log && *low < 1 {
                    return err("log scale needs low >= 1");
                }
            }
            Distribution::Categorical { choices } => {
                if choices.is_empty() {
                    return err("categorical needs at least one choice");
                }
            }
        }
    }
    Ok(())
}

/// Independent draws from each distribution, as Optuna's `RandomSampler`.
pub struct RandomSampler {
    seed: Option<u64>,
    /// Used only when unseeded: reproducibility was not asked for, so one stream suffices.
    entropy: ChaCha8Rng,
}

impl RandomSampler {
    pub fn new(seed: Option<u64>) -> Self {
        RandomSampler {
            seed,
            entropy: ChaCha8Rng::from_entropy(),
        }
    }
}

impl Sampler for RandomSampler {
    fn sample(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Params> {
        // A fresh stream per trial number makes the proposal a pure function of (seed, key).
        let mut keyed;
        let rng: &mut ChaCha8Rng = match self.seed {
            Some(seed) => {
                keyed = ChaCha8Rng::seed_from_u64(seed);
                keyed.set_stream(seed_key);
                &mut keyed
            }
            None => &mut self.entropy,
        };
        let mut out = fixed.clone();
        for p in &space.params {
            if out.contains_key(&p.name) {
                continue;
            }
            // Only an invalid distribution (which `build` rejects) yields None here; refusing
            // to propose is better than inventing an out-of-domain value.
            out.insert(p.name.clone(), draw(&p.dist, rng)?);
        }
        Some(out)
    }

    fn observe(&mut self, _number: i64, _params: &Params) {}

    fn tell(&mut self, _record: &TrialRecord) {}
}

/// One draw from `dist`; `None` if the distribution is empty or malformed.
fn draw(dist: &Distribution, rng: &mut impl Rng) -> Option<ParamValue> {
    let v = match *dist {
        Distribution::Float {
            low,
            high,
            step,
            log,
        } => {
            if low.is_nan() || high.is_nan() || low > high {
                return None;
            }
            let x = match step {
                Some(s) if s > 0.0 => {
                    let k = rng.gen_range(0..=last_step(low, high, s));
                    // low + step*k can overshoot high by an ulp; clamp keeps it in domain.
                    (low + s * k as f64).min(high)
                }
                Some(_) => return None,
                None if log => {
                    if low <= 0.0 {
                        return None;
                    }
                    let (a, b) = (low.ln(), high.ln());
                    (a + rng.gen::<f64>() * (b - a)).exp().clamp(low, high)
                }
                None => (low + rng.gen::<f64>() * (high - low)).clamp(low, high),
            };
            ParamValue::Float(x)
        }
        Distribution::Int {
            low,
            high,
            step,
            log,
        } => {
            if low > high || step <= 0 {
                return None;
            }
            // i128 so that extreme bounds cannot overflow the span.
            let n = ((high as i128 - low as i128) / step as i128) as u64;
            let k = if log {
                if low < 1 {
                    return None;
                }
                // Optuna widens the range by half a unit on each side before going to log
                // space, so the end points get their fair share after rounding.
                let (a, b) = ((low as f64 - 0.5).ln(), (high as f64 + 0.5).ln());
                let x = (a + rng.gen::<f64>() * (b - a)).exp();
                (((x - low as f64) / step as f64).round().max(0.0) as u64).min(n)
            } else {
                rng.gen_range(0..=n)
            };
            ParamValue::Int((low as i128 + step as i128 * k as i128) as i64)
        }
        Distribution::Categorical { ref choices } => {
            if choices.is_empty() {
                return None;
            }
            ParamValue::Choice(rng.gen_range(0..choices.len()))
        }
    };
    debug_assert!(dist.contains(&v), "{v:?} outside {dist:?}");
    Some(v)
}

/// The index of the last point of the float grid `low + step * k` that does not pass `high`.
/// `round` absorbs the float error in `(high - low) / step`, but when `high` is off the grid
/// rounding up would put that point past `high`; Optuna avoids this by lowering `high` to the
/// grid, and stepping back one point here is the same thing.
fn last_step(low: f64, high: f64, step: f64) -> u64 {
    let span = (high - low) / step;
    let mut n = span.round();
    if n > span + 1e-8 {
        n -= 1.0;
    }
    n.max(0.0) as u64
}

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
        let mut axes = Vec::with_capacity(space.params.len());
        let mut total: u64 = 1;
        let too_big = || format!("grid sampler: the grid has more than {MAX_GRID_POINTS} points");
        for p in &space.params {
            // Sized here before `grid_len` is asked, whose arithmetic would overflow on a
            // range of many more points than we accept anyway.
            let len = match p.dist {
                Distribution::Float {
                    low,
                    high,
                    step: Some(s),
                    ..
                } => {
                    if (high - low) / s > MAX_GRID_POINTS as f64 {
                        return Err(too_big());
                    }
                    // Not `grid_len`, which rounds up to a point past an off-grid `high`.
                    last_step(low, high, s) + 1
                }
                Distribution::Int {
                    low, high, step, ..
                } if (high as i128 - low as i128) / step as i128 > MAX_GRID_POINTS as i128 => {
                    return Err(too_big());
                }
                _ => p.dist.grid_len().ok_or_else(|| {
                    format!(
                        "grid sampler: param `{}` is continuous; give it a `step` or use the random sampler",
                        p.name
                    )
                })?,
            };
            total = total
                .checked_mul(len)
                .filter(|&t| t <= MAX_GRID_POINTS)
                .ok_or_else(too_big)?;
            axes.push((p.name.clone(), p.dist.clone(), len));
        }
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
    fn sample(&mut self, _space: &SearchSpace, fixed: &Params, _seed_key: u64) -> Option<Params> {
        while self.cursor < self.order.len() && self.is_taken(self.order[self.cursor]) {
            self.cursor += 1;
        }
        let id = *self.order.get(self.cursor)?;
        self.take(id);
        self.cursor += 1;
        let mut out = self.point(id as u64);
        // An enqueued trial's own values win, as in Optuna where fixed params bypass the sampler.
        out.extend(fixed.iter().map(|(k, v)| (k.clone(), v.clone())));
        Some(out)
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

    use crate::study::space::test_util::{cat, float, int, spec};

    fn mixed_space() -> SearchSpace {
        SearchSpace {
            params: vec![
                spec("f", float(-1.0, 2.5, None, false)),
                spec("lf", float(1e-5, 1e-1, None, true)),
                spec("sf", float(0.0, 0.3, Some(0.1), false)),
                spec("sf_off", float(0.0, 1.0, Some(0.4), false)),
                spec("i", int(-3, 7, 1, false)),
                spec("li", int(1, 1000, 1, true)),
                spec("si", int(2, 11, 3, false)),
                spec("c", cat(4)),
            ],
        }
    }

    fn grid_space() -> SearchSpace {
        SearchSpace {
            params: vec![
                spec("x", float(0.0, 0.3, Some(0.1), false)),
                spec("n", int(2, 6, 2, false)),
                spec("opt", cat(2)),
            ],
        }
    }

    fn float_of(p: &Params, k: &str) -> f64 {
        match p[k] {
            ParamValue::Float(x) => x,
            ref v => panic!("{k} = {v:?}"),
        }
    }

    fn int_of(p: &Params, k: &str) -> i64 {
        match p[k] {
            ParamValue::Int(x) => x,
            ref v => panic!("{k} = {v:?}"),
        }
    }

    fn draws(space: &SearchSpace, n: u64) -> Vec<Params> {
        let mut s = RandomSampler::new(Some(42));
        (0..n)
            .map(|k| s.sample(space, &Params::new(), k).unwrap())
            .collect()
    }

    #[test]
    fn random_is_a_function_of_seed_and_key() {
        let space = mixed_space();
        let mut a = RandomSampler::new(Some(7));
        let mut b = RandomSampler::new(Some(7));
        let none = Params::new();
        // b sees the keys in another order and with extra calls in between: dispatch order
        // and restarts must not matter.
        let pa: Vec<_> = (0..10)
            .map(|k| a.sample(&space, &none, k).unwrap())
            .collect();
        for k in (0..10).rev() {
            b.sample(&space, &none, 1000 + k);
            assert_eq!(b.sample(&space, &none, k).unwrap(), pa[k as usize]);
        }
        assert_ne!(pa[0], pa[1]);
        let other_seed = RandomSampler::new(Some(8))
            .sample(&space, &none, 0)
            .unwrap();
        assert_ne!(other_seed, pa[0]);
    }

    #[test]
    fn unseeded_random_still_varies() {
        let space = mixed_space();
        let mut s = RandomSampler::new(None);
        let a = s.sample(&space, &Params::new(), 0).unwrap();
        let b = s.sample(&space, &Params::new(), 0).unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn random_values_stay_in_domain() {
        let space = mixed_space();
        for p in draws(&space, 5000) {
            assert_eq!(p.len(), space.params.len());
            for spec in &space.params {
                assert!(spec.dist.contains(&p[&spec.name]), "{}: {p:?}", spec.name);
            }
        }
    }

    #[test]
    fn random_reaches_the_ends_of_discrete_ranges() {
        let space = mixed_space();
        let ps = draws(&space, 3000);
        let seen = |k: &str| -> BTreeSet<i64> { ps.iter().map(|p| int_of(p, k)).collect() };
        assert_eq!(seen("i"), (-3..=7).collect());
        assert_eq!(seen("si"), [2, 5, 8, 11].into());
        // P(1000) is about 1e-4 per draw under the log scale, so only the low end is checked.
        assert!(seen("li").contains(&1));
        let sf: BTreeSet<u64> = ps
            .iter()
            .map(|p| (float_of(p, "sf") * 10.0).round() as u64)
            .collect();
        assert_eq!(sf, [0, 1, 2, 3].into());
        // High is off the 0.4 grid: only 0, 0.4 and 0.8 are legal.
        let off: BTreeSet<u64> = ps
            .iter()
            .map(|p| (float_of(p, "sf_off") * 10.0).round() as u64)
            .collect();
        assert_eq!(off, [0, 4, 8].into());
    }

    #[test]
    fn log_float_is_uniform_in_log_space() {
        let space = mixed_space();
        let mut xs: Vec<f64> = draws(&space, 2000)
            .iter()
            .map(|p| float_of(p, "lf"))
            .collect();
        xs.sort_by(f64::total_cmp);
        let median = xs[xs.len() / 2];
        assert!((1e-4..=1e-2).contains(&median), "median {median}");
        // A linear sampler would put almost everything above 1e-3.
        let below = xs.iter().filter(|&&x| x < 1e-3).count();
        assert!((700..1300).contains(&below), "{below} below 1e-3");
    }

    #[test]
    fn log_int_favours_small_values() {
        let space = mixed_space();
        let ps = draws(&space, 3000);
        let small = ps.iter().filter(|p| int_of(p, "li") <= 10).count() as f64 / 3000.0;
        // Optuna's widened log range gives ln(21)/ln(2001) = 0.40; linear would give 0.01.
        assert!((0.3..0.5).contains(&small), "P(x<=10) = {small}");
    }

    #[test]
    fn categorical_hits_every_choice() {
        let space = mixed_space();
        let seen: BTreeSet<usize> = draws(&space, 200)
            .iter()
            .map(|p| match p["c"] {
                ParamValue::Choice(i) => i,
                ref v => panic!("{v:?}"),
            })
            .collect();
        assert_eq!(seen, (0..4).collect());
    }

    #[test]
    fn random_degenerate_ranges_return_the_bound() {
        let space = SearchSpace {
            params: vec![
                spec("f", float(0.5, 0.5, None, false)),
                spec("lf", float(2.0, 2.0, None, true)),
                spec("i", int(3, 3, 1, false)),
                spec("li", int(4, 4, 1, true)),
            ],
        };
        let p = RandomSampler::new(Some(1))
            .sample(&space, &Params::new(), 0)
            .unwrap();
        assert_eq!(float_of(&p, "f"), 0.5);
        assert_eq!(float_of(&p, "lf"), 2.0);
        assert_eq!(int_of(&p, "i"), 3);
        assert_eq!(int_of(&p, "li"), 4);
    }

    #[test]
    fn random_keeps_fixed_params() {
        let space = mixed_space();
        let mut fixed = Params::new();
        // Deliberately a value the sampler could not produce, plus one outside the space.
        fixed.insert("f".into(), ParamValue::Float(123.0));
        fixed.insert("c".into(), ParamValue::Choice(3));
        fixed.insert("extra".into(), ParamValue::Int(9));
        let mut s = RandomSampler::new(Some(3));
        for k in 0..50 {
            let p = s.sample(&space, &fixed, k).unwrap();
            assert_eq!(p["f"], ParamValue::Float(123.0));
            assert_eq!(p["c"], ParamValue::Choice(3));
            assert_eq!(p["extra"], ParamValue::Int(9));
            assert_eq!(p.len(), space.params.len() + 1);
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

    #[test]
    fn build_checks_the_space() {
        let bad = SearchSpace {
            params: vec![spec("i", int(0, 10, 0, false))],
        };
        assert!(build(
            SamplerKind::Random,
            &bad,
            None,
            Direction::Minimize,
            &Default::default()
        )
        .is_err());
        assert!(build(
            SamplerKind::Grid,
            &bad,
            None,
            Direction::Minimize,
            &Default::default()
        )
        .is_err());
        let mut s = build(
            SamplerKind::Grid,
            &grid_space(),
            Some(1),
            Direction::Minimize,
            &Default::default(),
        )
        .unwrap();
        assert!(s.sample(&grid_space(), &Params::new(), 0).is_some());
        let mut r = build(
            SamplerKind::Random,
            &mixed_space(),
            Some(1),
            Direction::Minimize,
            &Default::default(),
        )
        .unwrap();
        assert!(r.sample(&mixed_space(), &Params::new(), 0).is_some());
    }
}
