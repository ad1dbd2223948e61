//! Quasi-random points, as Optuna's GP draws them: scrambled Sobol points in the unit cube for
//! the acquisition's first candidates (`scipy.stats.qmc.Sobol(scramble=True)` there), and the
//! same mapped to standard normals for the Monte Carlo acquisition over running trials
//! (`sample_from_normal_sobol` there, torch's `SobolEngine`). The Sobol points are
//! `sobol_burley`'s (Owen-scrambled, seeded): not Optuna's stream, but the same kind of point set.

/// The most dimensions `sobol_burley` scrambles independently; further ones take another seed.
const SOBOL_DIMS: usize = 256;

/// One coordinate of Sobol point `i` of the sequence `seed`, in (0, 1): the middle of the f32
/// cell `sobol_burley` returns, so that never 0 nor 1 (whose normal would be infinite).
fn coordinate(i: usize, dim: usize, seed: u32) -> f64 {
    let block = (dim / SOBOL_DIMS) as u32;
    let seed = seed ^ block.wrapping_mul(0x9E37_79B9);
    let u = sobol_burley::sample(i as u32, (dim % SOBOL_DIMS) as u32, seed);
    f64::from(u) + 0.5 / f64::from(1u32 << 24)
}

/// `n` points of the unit cube of `dim` dimensions, one row each.
pub(super) fn uniform(n: usize, dim: usize, seed: u32) -> Vec<Vec<f64>> {
    (0..n)
        .map(|i| (0..dim).map(|d| coordinate(i, d, seed)).collect())
        .collect()
}

/// `n` points whose coordinates are standard normals, one row each.
pub(super) fn normal(n: usize, dim: usize, seed: u32) -> Vec<Vec<f64>> {
    (0..n)
        .map(|i| (0..dim).map(|d| ndtri(coordinate(i, d, seed))).collect())
        .collect()
}

/// The standard normal's quantile function at `p` in (0, 1): Acklam's rational approximation,
/// refined by one Halley step on `erfc`, which brings it to a few ulps.
pub(super) fn ndtri(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    if p <= 0.0 {
        return f64::NEG_INFINITY;
    }
    if p >= 1.0 {
        return f64::INFINITY;
    }
    let tail = |q: f64| {
        let q = (-2.0 * q.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    let x = if p < 0.02425 {
        tail(p)
    } else if p > 1.0 - 0.02425 {
        -tail(1.0 - p)
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    };
    // Halley: e = Phi(x) - p, u = e / phi(x).
    let e = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2) - p;
    let u = e * (2.0 * std::f64::consts::PI).sqrt() * (x * x / 2.0).exp();
    x - u / (1.0 + x * u / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_invert_the_normal_cdf() {
        for p in [
            1e-300,
            1e-12,
            0.001,
            0.02,
            0.3,
            0.5,
            0.77,
            0.99,
            1.0 - 1e-12,
        ] {
            let x = ndtri(p);
            let back = 0.5 * libm::erfc(-x / std::f64::consts::SQRT_2);
            assert!(
                (back - p).abs() <= 1e-14 * p.max(1e-300) + 1e-300,
                "{p}: {x} -> {back}"
            );
        }
        assert_eq!(ndtri(0.5), 0.0);
        assert!((ndtri(0.975) - 1.959_963_984_540_054).abs() < 1e-14);
    }

    #[test]
    fn points_fill_the_cube_evenly_and_differ_by_seed() {
        let pts = uniform(1024, 300, 5);
        for d in [0, 7, 255, 256, 299] {
            let mut bins = [0; 8];
            for p in &pts {
                assert!(p[d] > 0.0 && p[d] < 1.0);
                bins[(p[d] * 8.0) as usize] += 1;
            }
            // A (0, m)-net: each dyadic interval holds exactly its share.
            assert!(bins.iter().all(|&b| b == 128), "dim {d}: {bins:?}");
        }
        assert_ne!(uniform(4, 2, 5), uniform(4, 2, 6));
        assert_eq!(uniform(4, 2, 5), uniform(4, 2, 5));
        let z = normal(4096, 2, 1);
        let mean: f64 = z.iter().map(|r| r[1]).sum::<f64>() / 4096.0;
        let var: f64 = z.iter().map(|r| r[1] * r[1]).sum::<f64>() / 4096.0;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
    }
}
