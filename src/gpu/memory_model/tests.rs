//! The memory model against seeded workloads: what it learns, how close its bound is, how often
//! it falls short.

use super::*;
use crate::study::space::test_util::{float, int, spec};
use rand::{Rng, SeedableRng};

const MIB: u64 = 1 << 20;

fn space() -> SearchSpace {
    SearchSpace {
        params: vec![
            spec("width", int(64, 2048, 1, false)),
            spec("depth", int(1, 16, 1, false)),
            spec("lr", float(1e-5, 1e-1, None, true)),
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
            spec("width", int(64, 1024, 1, true)),
            spec("depth", int(1, 8, 1, false)),
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

/// A trial of the continuous workload drawn at random (the bench's ranges), ±2% from trial to
/// trial, and its peak.
fn continuous_trial(rng: &mut impl Rng) -> (Params, u64) {
    let w = (64.0 * 16f64.powf(rng.gen_range(0.0..1.0))).round() as i64;
    let d = rng.gen_range(1..=8);
    let lr = 10f64.powf(rng.gen_range(-5.0..-1.0));
    let peak = continuous_peak(w, d, 1.0 + 0.02 * rng.gen_range(-1.0..1.0));
    (params(w, d, lr), peak)
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
            let (p, peak) = continuous_trial(&mut rng);
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

/// The learning rate does nothing to memory, but in the fit linear in the params' log sizes it
/// took up the curvature width × depth leaves there (its linear feature, near 0 for most
/// values, fits a few trials' errors), and stayed in the fit once the products of width and
/// depth curved it: named among the params that drive memory in 89% of the estimates with 8 to
/// 19 trials measured, 69% from 40 on, widening the bound by its errors (`fit::drop_passengers`).
#[test]
fn a_param_of_no_effect_leaves_the_fit_once_products_curve_it() {
    let space = continuous_space();
    let mut stayed = 0;
    for seed in 0..40 {
        let mut m = MemoryModel::new(&space, 6 << 30);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        for _ in 0..30 {
            let (p, peak) = continuous_trial(&mut rng);
            m.record(&p, peak);
        }
        let why = m.estimate(&params(512, 4, 1e-3)).why;
        assert!(why.contains("with products of them"), "{why}");
        if !why.contains("lr does not") {
            stayed += 1;
        }
    }
    // 4 of 40 (where its leave-one-out error says it helps by chance); 31 before.
    assert!(
        stayed <= 8,
        "the learning rate stayed in {stayed} of 40 fits"
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
    let space = SearchSpace {
        params: vec![
            spec("width", int(64, 1024, 1, true)),
            spec("depth", int(1, 12, 1, false)),
            spec("batch", int(16, 256, 1, true)),
            spec("lr", float(1e-5, 1e-1, None, true)),
            spec("dropout", float(0.0, 0.5, None, false)),
            spec("wd", float(1e-6, 1e-2, None, true)),
            spec(
                "opt",
                Distribution::Categorical {
                    choices: vec![serde_json::json!("sgd"), serde_json::json!("adam")],
                },
            ),
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
            let peak =
                (500.0 * MIB as f64 + (300.0 * MIB as f64 + weights + activations) * noise) as u64;
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
    eprintln!("peak {}; {}", format_gib(peak), e.why);
    assert!(
        e.bytes >= peak,
        "{} for a peak of {}: {}",
        format_gib(e.bytes),
        format_gib(peak),
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
/// made that 12.0 GiB, admitted beside other trials on a full card. A linear fit (the first
/// 8 of those trials) is widened beyond the largest peak measured; the fit on all 13 has the
/// products of width and depth, which reach the peak themselves, and is not widened.
#[rstest::rstest]
#[case::linear(8, "beyond the largest peak measured", true)]
#[case::with_products(13, "with products of them", false)]
fn the_largest_config_after_small_ones_is_not_expected_at_their_slope(
    #[case] measured: usize,
    #[case] words: &str,
    #[case] widened: bool,
) {
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
    ]
    .into_iter()
    .take(measured)
    {
        m.record(&params(w, d, lr), mib * MIB);
    }
    let largest = m.estimate(&params(834, 8, 2.44e-02));
    covers(&largest, 14300 * MIB, words);
    assert_eq!(
        largest
            .why
            .contains("wider beyond the largest peak measured"),
        widened,
        "{}",
        largest.why
    );
    // A trial among the measured ones pays nothing for it.
    let among = m.estimate(&params(200, 3, 1e-3));
    assert!(!among.why.contains("largest peak"), "{}", among.why);
}

/// A categorical `mem` ("small" or "large") that drives memory, and `lr`, which does not.
fn mode_space() -> SearchSpace {
    SearchSpace {
        params: vec![
            spec(
                "mem",
                Distribution::Categorical {
                    choices: vec![serde_json::json!("small"), serde_json::json!("large")],
                },
            ),
            spec("lr", float(1e-5, 1e-1, None, true)),
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
        format_gib(small)
    );
    assert!(
        (6644 * MIB..7300 * MIB).contains(&large),
        "large {}",
        format_gib(large)
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
    assert!(small < 3 << 30, "small {}", format_gib(small));
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
    let width = int(64, 2048, 1, false);
    m.param("width", &width);
    let only = |w: i64| -> Params { [("width".to_owned(), ParamValue::Int(w))].into() };
    for w in [64, 128, 256, 512, 1024, 2048] {
        m.record(&only(w), peak(w, 4));
    }
    // A new param appears (another branch of a define-by-run space).
    let heads = int(1, 16, 1, false);
    m.param("heads", &heads);
    let e = m.expected(&only(1024));
    assert!(
        e >= peak(1024, 4),
        "{} < {}",
        format_gib(e),
        format_gib(peak(1024, 4))
    );
}

/// Issue 41's profile: peak = a 600 MiB context + 4 MiB × (seq / 128)^1.5 × batch, `batch` a
/// categorical of sizes (16, 32, 64, 128), `lr` of no effect.
fn size_space() -> SearchSpace {
    let batch = Distribution::Categorical {
        choices: [16, 32, 64, 128].map(|b| serde_json::json!(b)).to_vec(),
    };
    SearchSpace {
        params: vec![
            spec("seq", int(128, 1024, 1, true)),
            spec("batch", batch),
            spec("lr", float(1e-5, 1e-1, None, true)),
        ],
    }
}

/// Params of [`size_space`] (`batch`: the choice's index) and their peak.
fn size_trial(seq: i64, batch: usize, lr: f64) -> (Params, u64) {
    let p = [
        ("seq".to_owned(), ParamValue::Int(seq)),
        ("batch".to_owned(), ParamValue::Choice(batch)),
        ("lr".to_owned(), ParamValue::Float(lr)),
    ]
    .into_iter()
    .collect();
    let grown = 4.0 * MIB as f64 * (seq as f64 / 128.0).powf(1.5) * f64::from(16 << batch);
    (p, 600 * MIB + grown as u64)
}

/// The estimates of `aim`'s model that fell below a measured trial no larger in any size, over
/// 60 seeds of 40 trials each (the largest batch only after 12 trials), those made before
/// `from` trials were measured left out.
fn below_a_smaller_measured_trial(aim: Aim, from: usize) -> Vec<String> {
    let mut below = Vec::new();
    for seed in 0..60 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut m = MemoryModel::new(&size_space(), 1 << 30).aiming(aim);
        let mut measured: Vec<(i64, usize, u64)> = Vec::new();
        for i in 0..40 {
            let seq = (128.0 * 8f64.powf(rng.gen_range(0.0..1.0))).round() as i64;
            let batch = rng.gen_range(0..if i < 12 { 3 } else { 4 });
            let (p, peak) = size_trial(seq, batch, 10f64.powf(rng.gen_range(-5.0..-1.0)));
            let peak = (peak as f64 * (1.0 + 0.02 * rng.gen_range(-1.0..1.0))) as u64;
            let smaller = measured
                .iter()
                .filter(|(s, b, _)| *s <= seq && *b <= batch)
                .map(|m| m.2)
                .max();
            let e = m.estimate(&p);
            if smaller.is_some_and(|s| e.bytes < s) && m.measured() >= from {
                below.push(format!("seed {seed}, trial {i}: {}", e.why));
            }
            m.record(&p, peak);
            measured.push((seq, batch, peak));
        }
    }
    below
}

/// Regression (issue 41): a trial whose batch size lay beyond the measured ones was estimated
/// at 1.2 GiB while smaller trials of the same kind had measured 1.9 GiB; it grew to 3.1 GiB
/// and two neighbours died. A trial no smaller in any size than a measured one is expected at
/// least at that one's peak; the learning rate, of no effect, does not stand in the way. (Short
/// of its own peak it may still be, beyond the sizes measured: the cap is for that.)
#[test]
fn no_estimate_falls_below_a_measured_trial_no_larger_in_any_size() {
    let below = below_a_smaller_measured_trial(Aim::Bound, MIN_MEASURED);
    assert!(below.is_empty(), "{below:#?}");
}

/// The rule asks for every size: a trial smaller in one of them is not raised to the peak of
/// a trial that is larger there, and a param whose growth shrinks memory counts the other way.
#[test]
fn a_measured_trial_raises_only_the_trials_no_smaller_in_every_size() {
    let space = SearchSpace {
        params: vec![
            spec("width", int(64, 2048, 1, false)),
            spec("chunks", int(1, 16, 1, false)),
        ],
    };
    // Memory grows with width and shrinks with chunks (activations computed a chunk at a time).
    let peak = |w: i64, c: i64| 500 * MIB + (w as u64 * 16 / c as u64) * MIB / 4;
    let p = |w: i64, c: i64| -> Params {
        [
            ("width".to_owned(), ParamValue::Int(w)),
            ("chunks".to_owned(), ParamValue::Int(c)),
        ]
        .into_iter()
        .collect()
    };
    let mut m = MemoryModel::new(&space, 6 << 30);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    for _ in 0..40 {
        let (w, c) = (rng.gen_range(64..=1024), rng.gen_range(1..=16));
        m.record(&p(w, c), peak(w, c));
    }
    m.record(&p(1024, 1), peak(1024, 1));
    // Narrower than the largest: not raised to its 4.5 GiB.
    let narrow = m.estimate(&p(512, 1));
    assert!(narrow.bytes < peak(1024, 1), "{}", narrow.why);
    // As wide, more chunks: smaller, not raised to it either.
    let chunked = m.estimate(&p(1024, 4));
    assert!(chunked.bytes < peak(1024, 1), "{}", chunked.why);
    assert!(
        !chunked.why.contains("no larger in any size"),
        "{}",
        chunked.why
    );
}

/// Under caps (issue 41) the estimate aims at the peak: on the continuous workload, the share
/// of estimates below the peak and the median estimate / peak, caps on beside caps off (run
/// with `--nocapture`: `docs/decisions.md`, "Bold estimates under caps", quotes them). A trial
/// among measured ones is expected a few % above its prediction, not at the p97 bound.
#[test]
fn estimates_under_caps_aim_at_the_peak() {
    let space = continuous_space();
    // (trials measured, estimate / peak, estimate / prediction) per aim.
    let mut by_aim: Vec<Vec<(usize, f64, f64)>> = Vec::new();
    for aim in [Aim::Bound, Aim::Peak] {
        let mut ratios = Vec::new();
        for seed in 0..40 {
            let mut m = MemoryModel::new(&space, 6 << 30).aiming(aim);
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            for i in 0..40 {
                let (p, peak) = continuous_trial(&mut rng);
                let e = m.estimate(&p);
                let over_prediction = e.bytes as f64 / e.predicted.max(1) as f64;
                ratios.push((i, e.bytes as f64 / peak as f64, over_prediction));
                m.record(&p, peak);
            }
        }
        by_aim.push(ratios);
    }
    let mut medians = Vec::new();
    for (aim, ratios) in ["caps off", "caps on"].iter().zip(&by_aim) {
        eprintln!("{aim}:");
        let pairs: Vec<(usize, f64)> = ratios.iter().map(|r| (r.0, r.1)).collect();
        shortfalls(&pairs, 0, MIN_MEASURED);
        shortfalls(&pairs, MIN_MEASURED, 8);
        shortfalls(&pairs, 8, 12);
        medians.push(shortfalls(&pairs, 12, 40));
    }
    let ((_, _, bound), (low, n, aimed)) = (medians[0], medians[1]);
    // Aimed at the peak: tighter than the bound, and below the peak far more often than its
    // 1 in 100, but not most of the time.
    assert!(
        aimed < bound - 0.04,
        "{aimed:.2} under caps, {bound:.2} off"
    );
    assert!(aimed > 0.97, "estimate/peak median {aimed:.2} under caps");
    assert!(low * 100 > n && low * 100 < 40 * n, "{low} of {n} below");
    // Among measured trials (from 12 on), a few % above the prediction at the median.
    let mut over: Vec<f64> = by_aim[1]
        .iter()
        .filter(|r| r.0 >= 12)
        .map(|r| r.2)
        .collect();
    over.sort_by(f64::total_cmp);
    let median = over[over.len() / 2];
    eprintln!("caps on, from 12 measured: estimate/prediction median {median:.3}");
    assert!(median < 1.05, "estimate/prediction median {median:.3}");
}

/// Under caps a study's first trials start at a quarter of `trial_memory` (1.5 GiB of the
/// default 6), not at 6.9 GiB, and at the largest peak measured (no margin) once one is;
/// without `trial_memory`, at nothing, as with caps off.
#[test]
fn under_caps_the_first_trials_start_at_a_small_prior() {
    let mut m = MemoryModel::new(&space(), 6 << 30).aiming(Aim::Peak);
    let e = m.estimate(&params(64, 1, 1e-3));
    assert_eq!(e.bytes, 1536 * MIB, "{}", e.why);
    assert!(e.why.contains("trial_memory (6.0 GiB) x 0.25"), "{}", e.why);
    m.record(&params(256, 2, 1e-3), 3 << 30);
    m.record(&params(2048, 16, 1e-3), 10 << 30);
    let e = m.estimate(&params(64, 1, 1e-3));
    assert_eq!(e.bytes, 10 << 30, "{}", e.why);
    assert!(e.why.contains("the largest peak measured"), "{}", e.why);
    m.record(&params(128, 1, 1e-3), 2 << 30);
    let e = m.estimate(&params(64, 1, 1e-3));
    assert!(e.why.contains("aimed at the peak"), "{}", e.why);
    assert_eq!(
        MemoryModel::new(&space(), 0)
            .aiming(Aim::Peak)
            .expected(&params(64, 1, 1e-3)),
        0
    );
}

/// Under caps too, a trial no smaller in any size than a measured one is expected at least at
/// its peak (the batch beyond the measured ones), from the first trial measured on
/// (before a fit, the largest peak measured is the prior).
#[test]
fn under_caps_no_estimate_falls_below_a_measured_trial_no_larger_in_any_size() {
    let below = below_a_smaller_measured_trial(Aim::Peak, 0);
    assert!(below.is_empty(), "{below:#?}");
}

/// What a re-run after a cap hit is expected at least: its level × 1.25 where that is more,
/// else 1.5 × what its attempt was admitted with.
#[rstest::rstest]
#[case::just_past_its_cap(2048, 2100, 3072)]
#[case::a_large_request(2048, 4096, 5120)]
#[case::nothing_admitted(0, 1024, 1280)]
fn a_re_run_after_a_cap_hit_is_expected_at_its_growth_at_least(
    #[case] admitted: u64,
    #[case] level: u64,
    #[case] want: u64,
) {
    assert_eq!(cap_floor(level * MIB, admitted * MIB), want * MIB);
}

/// A trial that allocates in small steps hits its cap just past it each time. With the floor at
/// its level × 1.25 alone it needed a re-run per 25% of growth: 5 from the small prior (1.5 GiB)
/// to a 4.5 GiB peak, 10 to 14 GiB. Grown by 1.5 × what it was admitted with, a few; and once it
/// completes, its measured peak replaces the floors its attempts left.
#[rstest::rstest]
#[case::within_the_prior(1.2, 0)]
#[case::three_times_the_prior(4.5, 3)]
#[case::twice_trial_memory(14.0, 6)]
fn a_trial_from_the_small_prior_reaches_its_peak_in_a_few_re_runs(
    #[case] peak_gib: f64,
    #[case] re_runs: usize,
) {
    const G: u64 = 1 << 30;
    let mut m = MemoryModel::new(&space(), 6 * G).aiming(Aim::Peak);
    let p = params(1024, 8, 1e-3);
    let peak = (peak_gib * G as f64) as u64;
    let mut hits = 0;
    loop {
        let admitted = m.expected(&p);
        if admitted >= peak {
            break;
        }
        // It asked for 64 MiB more than its cap left it.
        m.record_cap(&p, admitted + 64 * MIB, admitted, 24 * G);
        hits += 1;
        // Regression: the head named the figure before the raise, not the one admitted.
        let e = m.estimate(&p);
        assert!(
            e.why.starts_with(&format!("{}: ", format_gib(e.bytes))),
            "{}",
            e.why
        );
        assert!(hits < 20, "never converged");
    }
    assert_eq!(hits, re_runs);
    m.record(&p, peak);
    let e = m.estimate(&p);
    assert!(e.bytes < peak + peak / 20, "{}", e.why);
    assert!(!e.why.contains("cap reached"), "{}", e.why);
}
