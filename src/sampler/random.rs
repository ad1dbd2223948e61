//! The random sampler: independent draws from each distribution, as Optuna's `RandomSampler`.
//!
//! A seeded draw is a pure function of (seed, trial number, param name): each draws from its
//! own ChaCha8 stream ([`super::keyed_rng`]), so restarts, dispatch order and the order an
//! objective suggests its params in do not change a study's params. TPE's startup proposals
//! are this sampler's.

use super::{keyed_rng, Proposal, Sampler, RANDOM_DOMAIN};
use crate::study::space::{last_grid_index, last_int_index};
use crate::study::{Distribution, ParamValue, Params, SearchSpace, TrialRecord};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
    fn propose(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Proposal> {
        let mut params = fixed.clone();
        for p in &space.params {
            if params.contains_key(&p.name) {
                continue;
            }
            // Only an invalid distribution (which `build` rejects) fails here; refusing to
            // propose is better than inventing an out-of-domain value.
            let v = self.suggest(&p.name, &p.dist, seed_key).ok()?;
            params.insert(p.name.clone(), v);
        }
        Some(Proposal {
            params,
            relative: Default::default(),
        })
    }

    fn suggest(
        &mut self,
        name: &str,
        dist: &Distribution,
        seed_key: u64,
    ) -> Result<ParamValue, String> {
        let drawn = match self.seed {
            Some(seed) => draw(dist, &mut keyed_rng(seed, seed_key, name, RANDOM_DOMAIN)),
            None => draw(dist, &mut self.entropy),
        };
        drawn.ok_or_else(|| match dist.check() {
            Err(why) => format!("param `{name}`: {why}"),
            Ok(()) => format!("param `{name}`: nothing to draw from"),
        })
    }

    fn observe(&mut self, _number: i64, _params: &Params) {}

    fn tell(&mut self, _record: &TrialRecord) {}
}

/// One draw from `dist`; `None` if the distribution is empty or malformed.
fn draw(dist: &Distribution, rng: &mut impl Rng) -> Option<ParamValue> {
    dist.check().ok()?;
    let v = match *dist {
        Distribution::Float {
            low,
            high,
            step,
            log,
        } => {
            let x = match step {
                Some(s) => {
                    let k = rng.gen_range(0..=last_grid_index(low, high, s));
                    // low + step*k can overshoot high by an ulp; clamp keeps it in domain.
                    (low + s * k as f64).min(high)
                }
                None if log => {
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
            let n = last_int_index(low, high, step);
            let k = if log {
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
            ParamValue::Choice(rng.gen_range(0..choices.len()))
        }
    };
    debug_assert!(dist.contains(&v), "{v:?} outside {dist:?}");
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    use crate::sampler::testkit::{float_of, mixed_space};
    use crate::study::space::test_util::{float, int, spec};

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
}
