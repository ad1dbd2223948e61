//! The memory model: how much GPU memory a new trial is expected to need, from the measured
//! peaks of finished trials: the prior guess (`[gpu] trial_memory`) until [`MIN_MEASURED`]
//! trials are measured, then the largest peak of the [`K_NEAREST`] most similar measured trials,
//! with a margin; raised near params that ran out of memory. Admission
//! ([`super::Capacity`]) compares that estimate with what a device has free.
//!
//! Pure logic, no I/O. Users' view: `docs/gpu-memory-model.md`.

use super::fmt_gib;
use crate::study::{Distribution, ParamValue, Params, SearchSpace};
use std::collections::VecDeque;

/// `bytes × factor`, rounded up (saturating), for a factor ≥ 1.
fn scale_up(bytes: u64, factor: f64) -> u64 {
    (bytes as f64 * factor).ceil() as u64
}

/// Measured trials needed before the model trusts neighbours over the prior.
pub const MIN_MEASURED: usize = 5;
/// How many nearest measured trials an estimate looks at.
pub const K_NEAREST: usize = 3;
/// Safety margin on measured peaks.
pub const MARGIN: f64 = 1.15;
/// An OOM at `reached` bytes means the region needs at least `reached × OOM_GROWTH`.
pub const OOM_GROWTH: f64 = 1.25;
/// An OOM floor applies to params within this distance (in normalized parameter space).
pub const OOM_RADIUS: f64 = 0.25;
/// Measured peaks (and, separately, OOM floors) kept; older ones are forgotten first.
pub const MAX_SAMPLES: usize = 2000;

/// One parameter's value normalized for distances.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Coord {
    /// Position in [0, 1] across the range (log scale for log params).
    Num(f64),
    /// A categorical choice: equal choices are at distance 0, different ones at distance 1.
    Cat(usize),
}

/// A trial's params as coordinates, aligned with the search space's params (`None`: the trial
/// has no value for it, or one that does not fit the distribution).
type Point = Vec<Option<Coord>>;

#[derive(Debug, Clone)]
struct Sample {
    point: Point,
    peak: u64,
}

#[derive(Debug, Clone)]
struct Floor {
    point: Point,
    reached: u64,
    floor: u64,
}

/// The memory model: the expected peak of a new trial from the measured peaks of finished ones.
/// See the module documentation and `docs/gpu-memory-model.md`.
#[derive(Debug, Clone)]
pub struct MemoryModel {
    space: SearchSpace,
    prior: u64,
    samples: VecDeque<Sample>,
    floors: VecDeque<Floor>,
}

/// An estimate and its explanation (one computation serves both `expected` and `explain`).
struct Estimate {
    bytes: u64,
    why: String,
}

impl MemoryModel {
    /// `prior` is `[gpu] trial_memory`, the guess used until [`MIN_MEASURED`] trials are
    /// measured (0: no guess; only `max_par_per_device` limits the first trials).
    pub fn new(space: &SearchSpace, prior: u64) -> MemoryModel {
        MemoryModel {
            space: space.clone(),
            prior,
            samples: VecDeque::new(),
            floors: VecDeque::new(),
        }
    }

    /// Live reload of `[gpu] trial_memory`.
    pub fn set_prior(&mut self, prior: u64) {
        self.prior = prior;
    }

    /// A finished trial's measured peak (bytes), whatever its terminal state; for a trial that
    /// ran out of memory, record what it reached here and also call [`MemoryModel::record_oom`].
    /// A peak of 0 is ignored: a trial that never allocated on the GPU (it died at startup, or
    /// no reading was taken) says nothing about its memory. The last [`MAX_SAMPLES`] are kept.
    pub fn record(&mut self, params: &Params, peak: u64) {
        if peak == 0 {
            return;
        }
        let point = self.point(params);
        self.samples.push_back(Sample { point, peak });
        if self.samples.len() > MAX_SAMPLES {
            self.samples.pop_front();
        }
    }

    /// A trial with these params ran out of memory having reached `reached` bytes: params within
    /// [`OOM_RADIUS`] of these are expected to need at least `reached × 1.25`, or `device_total`
    /// if that is smaller (0: unknown, no cap). This does not count as a measured peak (see
    /// [`MemoryModel::record`]). The last [`MAX_SAMPLES`] floors are kept.
    pub fn record_oom(&mut self, params: &Params, reached: u64, device_total: u64) {
        let mut floor = scale_up(reached, OOM_GROWTH);
        if device_total > 0 {
            floor = floor.min(device_total);
        }
        if floor == 0 {
            return;
        }
        let point = self.point(params);
        self.floors.push_back(Floor {
            point,
            reached,
            floor,
        });
        if self.floors.len() > MAX_SAMPLES {
            self.floors.pop_front();
        }
    }

    /// Expected peak (bytes) for a trial with these params.
    pub fn expected(&self, params: &Params) -> u64 {
        self.estimate(params).bytes
    }

    /// How the estimate for `params` came about, for logs, e.g.
    /// "max of 3 nearest measured trials (5.1 GiB) x 1.15 = 5.9 GiB".
    pub fn explain(&self, params: &Params) -> String {
        self.estimate(params).why
    }

    /// Measured peaks held (at most [`MAX_SAMPLES`]).
    pub fn measured(&self) -> usize {
        self.samples.len()
    }

    fn estimate(&self, params: &Params) -> Estimate {
        let point = self.point(params);
        let n = self.samples.len();
        let (mut bytes, mut why) = if n < MIN_MEASURED {
            let largest = self.samples.iter().map(|s| s.peak).max().unwrap_or(0);
            let progress = format!("{n} of {MIN_MEASURED} trials measured");
            if largest > self.prior {
                let b = scale_up(largest, MARGIN);
                let why = format!(
                    "largest measured peak ({}) x {MARGIN} = {} ({progress})",
                    fmt_gib(largest),
                    fmt_gib(b)
                );
                (b, why)
            } else if self.prior > 0 {
                let b = scale_up(self.prior, MARGIN);
                let why = format!(
                    "prior trial_memory ({}) x {MARGIN} = {} ({progress})",
                    fmt_gib(self.prior),
                    fmt_gib(b)
                );
                (b, why)
            } else {
                (
                    0,
                    format!("no estimate yet: trial_memory unset, {progress}"),
                )
            }
        } else {
            let nearest = self.nearest(&point);
            let top = nearest.iter().map(|&(_, peak)| peak).max().unwrap_or(0);
            let mut b = scale_up(top, MARGIN);
            let mut why = format!(
                "max of {} nearest measured trials ({}) x {MARGIN} = {}",
                nearest.len(),
                fmt_gib(top),
                fmt_gib(b)
            );
            let median = self.median_peak();
            if median > b {
                b = median;
                why.push_str(&format!(
                    ", raised to the median of {n} measured peaks ({})",
                    fmt_gib(median)
                ));
            }
            (b, why)
        };
        // The highest OOM floor near these params (the nearest one on a tie).
        let floor = self
            .floors
            .iter()
            .map(|f| (f, distance(&point, &f.point)))
            .filter(|&(_, d)| d <= OOM_RADIUS)
            .max_by(|a, b| a.0.floor.cmp(&b.0.floor).then(b.1.total_cmp(&a.1)));
        if let Some((f, d)) = floor {
            if f.floor > bytes {
                bytes = f.floor;
                why.push_str(&format!(
                    ", raised to {} by an out-of-memory failure at {} (distance {d:.2})",
                    fmt_gib(f.floor),
                    fmt_gib(f.reached)
                ));
            }
        }
        Estimate { bytes, why }
    }

    /// The (distance, peak) of the [`K_NEAREST`] measured trials nearest to `point`; on equal
    /// distances the more recently measured wins. Deterministic, O(n·k).
    fn nearest(&self, point: &Point) -> Vec<(f64, u64)> {
        // (distance, recency rank, peak); a smaller rank is more recent.
        let mut best: Vec<(f64, usize, u64)> = Vec::with_capacity(K_NEAREST + 1);
        let n = self.samples.len();
        for (i, s) in self.samples.iter().enumerate() {
            let d = distance(point, &s.point);
            let rank = n - 1 - i;
            let worse = |a: &(f64, usize, u64)| a.0.total_cmp(&d).then(a.1.cmp(&rank)).is_gt();
            if best.len() < K_NEAREST || best.last().is_some_and(worse) {
                let pos = best.iter().position(worse).unwrap_or(best.len());
                best.insert(pos, (d, rank, s.peak));
                best.truncate(K_NEAREST);
            }
        }
        best.into_iter().map(|(d, _, peak)| (d, peak)).collect()
    }

    /// The median of the measured peaks held (the mean of the two middle ones for an even count).
    fn median_peak(&self) -> u64 {
        let mut peaks: Vec<u64> = self.samples.iter().map(|s| s.peak).collect();
        if peaks.is_empty() {
            return 0;
        }
        peaks.sort_unstable();
        let m = peaks.len() / 2;
        if peaks.len() % 2 == 1 {
            peaks[m]
        } else {
            let (lo, hi) = (peaks[m - 1], peaks[m]);
            lo + (hi - lo) / 2
        }
    }

    fn point(&self, params: &Params) -> Point {
        self.space
            .params
            .iter()
            .map(|spec| params.get(&spec.name).and_then(|v| coord(&spec.dist, v)))
            .collect()
    }
}

/// A value normalized to [0, 1] along its distribution (log scale for log params), or a choice.
fn coord(dist: &Distribution, v: &ParamValue) -> Option<Coord> {
    let (x, low, high, log) = match (dist, v) {
        (Distribution::Categorical { .. }, ParamValue::Choice(i)) => return Some(Coord::Cat(*i)),
        (Distribution::Categorical { .. }, _) | (_, ParamValue::Choice(_)) => return None,
        (Distribution::Float { low, high, log, .. }, _) => (dist.to_internal(v), *low, *high, *log),
        (Distribution::Int { low, high, log, .. }, _) => {
            (dist.to_internal(v), *low as f64, *high as f64, *log)
        }
    };
    let (x, low, high) = if log && x > 0.0 && low > 0.0 && high > 0.0 {
        (x.ln(), low.ln(), high.ln())
    } else {
        (x, low, high)
    };
    let span = high - low;
    let u = if span > 0.0 { (x - low) / span } else { 0.0 };
    u.is_finite().then_some(Coord::Num(u))
}

/// Euclidean distance over the params both points have.
fn distance(a: &Point, b: &Point) -> f64 {
    a.iter()
        .zip(b)
        .map(|pair| match pair {
            (Some(Coord::Num(x)), Some(Coord::Num(y))) => (x - y) * (x - y),
            (Some(Coord::Cat(i)), Some(Coord::Cat(j))) => f64::from(u8::from(i != j)),
            _ => 0.0,
        })
        .sum::<f64>()
        .sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::GIB;
    use crate::study::space::test_util::{cat, float, int, spec};

    const G: u64 = 1 << 30;

    fn gib(x: f64) -> u64 {
        (x * GIB) as u64
    }

    fn space() -> SearchSpace {
        SearchSpace {
            params: vec![
                spec("dim", int(32, 1024, 1, true)),
                spec("lr", float(1e-5, 1e-1, None, true)),
                spec("opt", cat(2)),
            ],
        }
    }

    fn p(dim: i64, lr: f64, opt: usize) -> Params {
        [
            ("dim".to_string(), ParamValue::Int(dim)),
            ("lr".to_string(), ParamValue::Float(lr)),
            ("opt".to_string(), ParamValue::Choice(opt)),
        ]
        .into_iter()
        .collect()
    }

    /// A sweep where memory grows with `dim`: 80 → ~3 GiB, 512 → ~20 GiB.
    fn trained() -> MemoryModel {
        let mut m = MemoryModel::new(&space(), 6 * G);
        for (dim, lr, opt, peak) in [
            (64, 1e-3, 0, 2.5),
            (80, 1e-4, 1, 3.0),
            (96, 1e-2, 0, 3.2),
            (72, 3e-3, 1, 2.8),
            (100, 1e-5, 0, 3.4),
            (88, 1e-3, 1, 3.1),
            (512, 1e-3, 0, 20.0),
            (480, 1e-2, 1, 18.5),
            (560, 1e-4, 0, 21.0),
            (500, 3e-4, 1, 19.5),
        ] {
            m.record(&p(dim, lr, opt), gib(peak));
        }
        m
    }

    #[test]
    fn prior_until_five_measured() {
        let mut m = MemoryModel::new(&space(), 6 * G);
        let q = p(80, 1e-3, 0);
        assert_eq!(m.expected(&q), scale_up(6 * G, 1.15));
        assert!(m
            .explain(&q)
            .starts_with("prior trial_memory (6.0 GiB) x 1.15"));
        for i in 0..4 {
            m.record(&p(80 + i, 1e-3, 0), 2 * G);
        }
        assert_eq!(m.measured(), 4);
        assert_eq!(m.expected(&q), scale_up(6 * G, 1.15));
        m.record(&p(900, 1e-3, 0), 8 * G);
        assert_eq!(m.measured(), 5);
        // Now 5 measured: the 3 nearest to dim 80 are the 2 GiB ones, the 8 GiB one is far.
        assert_eq!(m.expected(&q), scale_up(2 * G, 1.15));
        // Before MIN_MEASURED, a measured peak above the prior raises it.
        let mut m4 = MemoryModel::new(&space(), 6 * G);
        for i in 0..3 {
            m4.record(&p(80 + i, 1e-3, 0), 2 * G);
        }
        m4.record(&p(900, 1e-3, 0), 8 * G);
        assert_eq!(m4.expected(&q), scale_up(8 * G, 1.15));
        assert!(m4.explain(&q).contains("largest measured peak (8.0 GiB)"));
        assert!(m4.explain(&q).contains("4 of 5 trials measured"));
        m4.set_prior(10 * G);
        assert_eq!(m4.expected(&q), scale_up(10 * G, 1.15));
        // Zero peaks tell nothing and are not counted.
        m4.record(&q, 0);
        assert_eq!(m4.measured(), 4);
        // No prior, nothing measured: 0.
        let m0 = MemoryModel::new(&space(), 0);
        assert_eq!(m0.expected(&q), 0);
        assert!(m0.explain(&q).starts_with("no estimate yet"));
    }

    #[test]
    fn neighbours_of_a_high_region_are_predicted_high() {
        let m = trained();
        let high = m.expected(&p(500, 1e-3, 1));
        let low = m.expected(&p(80, 1e-3, 1));
        assert_eq!(high, scale_up(gib(19.5), 1.15), "{}", fmt_gib(high));
        assert_eq!(low, scale_up(gib(3.1), 1.15), "{}", fmt_gib(low));
        assert_eq!(
            m.explain(&p(80, 1e-3, 1)),
            "max of 3 nearest measured trials (3.1 GiB) x 1.15 = 3.6 GiB"
        );
        // A different optimizer is distance 1 away: with dim 500 and adam, the nearest are
        // the two large adam trials and dim 64 (distance 0.59), so still high.
        assert_eq!(m.expected(&p(500, 1e-3, 0)), scale_up(21 * G, 1.15));
        // Deterministic.
        assert_eq!(m.expected(&p(80, 1e-3, 1)), low);
    }

    #[test]
    fn categorical_dim_separates_regions() {
        // dim is a categorical of two widths (say 80 and 512).
        let sp = SearchSpace {
            params: vec![
                spec("dim", cat(2)),
                spec("dropout", float(0.0, 0.5, None, false)),
            ],
        };
        let q = |dim: usize, dropout: f64| -> Params {
            [
                ("dim".to_string(), ParamValue::Choice(dim)),
                ("dropout".to_string(), ParamValue::Float(dropout)),
            ]
            .into_iter()
            .collect()
        };
        let mut m = MemoryModel::new(&sp, 8 * G);
        // A far dropout (0.5 apart → distance 1.0) is as far as another dim (distance 1).
        for (i, d) in [0.0, 0.1, 0.2, 0.3, 0.4].into_iter().enumerate() {
            m.record(&q(0, d), gib(3.0) + i as u64);
        }
        m.record(&q(1, 0.25), 20 * G);
        m.record(&q(1, 0.1), gib(19.5));
        assert!(m.expected(&q(0, 0.5)) < gib(3.5));
        assert!(m.expected(&q(1, 0.0)) >= scale_up(20 * G, 1.15));
        // Median floor: once most measured trials are large, small ones are expected at the
        // median at least.
        for i in 0..10 {
            m.record(&q(1, 0.05 * i as f64), 20 * G);
        }
        assert_eq!(m.expected(&q(0, 0.0)), 20 * G);
        assert!(m
            .explain(&q(0, 0.0))
            .contains("raised to the median of 17 measured peaks"));
    }

    #[test]
    fn oom_floor_applies_to_neighbours_only() {
        let mut m = trained();
        let near = p(500, 1e-3, 0);
        let far = p(80, 1e-3, 0);
        let before_far = m.expected(&far);
        assert_eq!(m.expected(&near), scale_up(21 * G, 1.15));
        // OOM at 22 GiB on a 26 GiB card: floor min(27.5, 26) = 26 GiB, above 21 × 1.15.
        m.record_oom(&p(512, 1e-3, 0), 22 * G, 26 * G);
        assert_eq!(m.expected(&near), 26 * G);
        assert!(m
            .explain(&near)
            .contains(", raised to 26.0 GiB by an out-of-memory failure at 22.0 GiB"));
        assert_eq!(m.expected(&far), before_far);
        // The floor is not a measurement.
        assert_eq!(m.measured(), 10);
        // Below the device total: reached × 1.25.
        let mut m = trained();
        m.record_oom(&p(512, 1e-3, 0), 20 * G, 80 * G);
        assert_eq!(m.expected(&near), 25 * G);
        // A floor below the estimate changes nothing.
        let mut m = trained();
        m.record_oom(&far, G, 24 * G);
        assert_eq!(m.expected(&far), before_far);
        // Distance > 0.25 (another optimizer is distance 1): not a neighbour.
        let mut m = trained();
        m.record_oom(&p(512, 1e-3, 1), 20 * G, 80 * G);
        assert!(m.expected(&near) < 25 * G);
        assert_eq!(m.expected(&p(512, 1e-3, 1)), 25 * G);
    }

    #[test]
    fn oom_floor_applies_before_min_measured() {
        let mut m = MemoryModel::new(&space(), 4 * G);
        let q = p(256, 1e-3, 0);
        m.record_oom(&q, 10 * G, 24 * G);
        assert_eq!(m.expected(&q), gib(12.5));
        assert_eq!(m.expected(&p(32, 1e-3, 0)), scale_up(4 * G, 1.15));
    }

    #[test]
    fn normalization_and_distance() {
        let s = space();
        let dim = &s.params[0].dist;
        let Some(Coord::Num(u)) = coord(dim, &ParamValue::Int(181)) else {
            panic!()
        };
        // log scale: 181 ≈ sqrt(32 × 1024) is halfway.
        assert!((u - 0.5).abs() < 1e-3);
        assert_eq!(coord(dim, &ParamValue::Choice(0)), None);
        let lin = float(0.0, 2.0, None, false);
        assert_eq!(coord(&lin, &ParamValue::Float(0.5)), Some(Coord::Num(0.25)));
        let a = vec![Some(Coord::Num(0.0)), Some(Coord::Cat(0)), None];
        let b = vec![
            Some(Coord::Num(0.0)),
            Some(Coord::Cat(1)),
            Some(Coord::Num(1.0)),
        ];
        assert_eq!(distance(&a, &b), 1.0);
        let c = vec![
            Some(Coord::Num(0.6)),
            Some(Coord::Cat(0)),
            Some(Coord::Num(0.0)),
        ];
        assert!((distance(&b, &c) - (0.36f64 + 1.0 + 1.0).sqrt()).abs() < 1e-12);
        // A param outside the space is ignored.
        let m = MemoryModel::new(&s, G);
        let mut extra = p(64, 1e-3, 0);
        extra.insert("unknown".into(), ParamValue::Float(3.0));
        assert_eq!(m.point(&extra), m.point(&p(64, 1e-3, 0)));
    }

    #[test]
    fn samples_are_bounded() {
        let mut m = MemoryModel::new(&space(), G);
        for i in 0..(MAX_SAMPLES + 100) {
            m.record(&p(64, 1e-3, 0), G + i as u64);
            m.record_oom(&p(64, 1e-3, 0), G, 24 * G);
        }
        assert_eq!(m.measured(), MAX_SAMPLES);
        assert_eq!(m.floors.len(), MAX_SAMPLES);
        // The oldest went first.
        assert_eq!(m.samples.front().unwrap().peak, G + 100);
    }
}
