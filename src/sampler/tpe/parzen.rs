//! The Parzen estimators `l(x)` and `g(x)`: a mixture of one kernel per trial plus a prior
//! kernel, with Optuna 5.0's weights and bandwidths (the module docs of [`super`] give the rules).
//! An estimator draws candidates and scores them by their log density.

use super::model::{Model, Numeric};
use super::truncnorm::{log_gauss_mass, truncnorm_draw, LOG_SQRT_2PI};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;

/// Weight of the prior kernel in every Parzen estimator (Optuna's `prior_weight`).
const PRIOR_WEIGHT: f64 = 1.0;

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

/// A Parzen estimator: a mixture of product kernels, the last one the prior.
pub(super) struct Estimator {
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
    pub(super) fn new(models: &[&Model], dims: &[usize], rows: &[&[f64]]) -> Estimator {
        Estimator::weighted(models, dims, rows, false)
    }

    /// [`Estimator::new`]; `uniform`: every observation weighs the same (Optuna 5.0's "below"
    /// with several objectives) instead of the older ones fading.
    pub(super) fn weighted(
        models: &[&Model],
        dims: &[usize],
        rows: &[&[f64]],
        uniform: bool,
    ) -> Estimator {
        let kept: Vec<&[f64]> = rows
            .iter()
            .copied()
            .filter(|r| dims.iter().all(|&i| !r[i].is_nan()))
            .collect();
        let n = kept.len();
        let mut weights = if uniform {
            vec![1.0; n]
        } else {
            default_weights(n)
        };
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
    pub(super) fn sample(&self, rng: &mut ChaCha8Rng, count: usize) -> Vec<f64> {
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
    pub(super) fn log_pdf(&self, cands: &[f64]) -> Vec<f64> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampler::testkit::{close, f_of_value, mixed_objective, mixed_space, run, seeded};
    use crate::sampler::tpe::TpeSampler;
    use crate::study::space::test_util::{cat, float, int, spec};
    use crate::study::{Direction, Distribution, ParamValue, Params, SearchSpace};
    use rand::SeedableRng;

    fn refs(rows: &[Box<[f64]>]) -> Vec<&[f64]> {
        rows.iter().map(|r| &r[..]).collect()
    }

    #[test]
    fn weights_are_optunas() {
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
        let mut s = TpeSampler::new(Direction::Minimize, seeded(2));
        run(&mut s, &space, 0, 40, &mixed_objective);
        let (below, above) = s.split_coords(&space, None);
        let (below, above) = (refs(&below), refs(&above));
        let models = TpeSampler::models_of(&space);
        for (i, (_, m)) in models.iter().enumerate() {
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
        let mut s = TpeSampler::new(Direction::Minimize, seeded(6));
        run(&mut s, &space, 0, 40, &mixed_objective);
        let (below, above) = s.split_coords(&space, None);
        let (below, above) = (refs(&below), refs(&above));
        let models = TpeSampler::models_of(&space);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let n = 40_000;
        for (i, (_, m)) in models.iter().enumerate() {
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
        let models: Vec<Model> = TpeSampler::models_of(&space)
            .into_iter()
            .map(|(_, m)| m)
            .collect();
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
                .map(|r| TpeSampler::coords(&space, &to_params(r.as_array().unwrap())))
                .collect();
            let rows: Vec<&[f64]> = rows.iter().map(|r| &r[..]).collect();
            let pts: Vec<Params> = case["pts"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| to_params(r.as_array().unwrap()))
                .collect();
            let check = |dims: &[usize], want: &serde_json::Value| {
                let ms: Vec<&Model> = dims.iter().map(|&i| &models[i]).collect();
                let e = Estimator::new(&ms, dims, &rows);
                let cands: Vec<f64> = pts
                    .iter()
                    .flat_map(|p| {
                        dims.iter()
                            .map(|&i| candidate(&models[i], &p[&space.params[i].name]))
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
}
