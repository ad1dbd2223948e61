//! Multi-objective TPE's split, after Optuna 5.0 (`samplers/_tpe/sampler.py`,
//! `_hypervolume/{hssp,wfg}.py`): which feasible COMPLETE trials go "below" when a study has
//! several objectives.
//!
//! `gamma(n) = ceil(0.1 n)` trials go below (no cap at 25, unlike one objective). They are the
//! best non-domination ranks, whole, as long as they fit; the rank that does not fit whole is
//! cut by greedy hypervolume subset selection (HSSP): points are taken one at a time, each the
//! one adding the most hypervolume to those taken, against a reference point of 1.1 times the
//! rank's worst loss per objective (0.9 times where that is negative; `1e-12` where it is 0).
//! With an infinite loss in the rank the hypervolume is infinite and the first points in
//! lexicographic order are taken, as Optuna does. Below's kernels are then weighted equally
//! (Optuna 5.0 gives "below" uniform weights with several objectives).
//!
//! The tests compare the split and each param's `log l(x)`, `log g(x)` with what Optuna's own
//! code gives on the same trials (`optuna_multi_golden.py` writes it to the `.json` beside it).

use crate::study::pareto::fast_nondomination_ranks;
use std::cmp::Ordering;

/// Optuna's `default_gamma_multiobjective`.
pub(super) fn gamma(n: usize) -> usize {
    (0.1 * n as f64).ceil() as usize
}

/// Indices of the `n_below` rows (losses of feasible COMPLETE trials, in trial order) that go
/// below: Optuna's `_split_complete_trials_multi_objective`.
pub(super) fn select_below(rows: &[&[f64]], n_below: usize) -> Vec<usize> {
    let n_below = n_below.min(rows.len());
    if n_below == 0 {
        return Vec::new();
    }
    if n_below == rows.len() {
        return (0..rows.len()).collect();
    }
    let ranks = fast_nondomination_ranks(rows, None, Some(n_below));
    // The whole ranks that fit: count rows per rank in rank order.
    let max_rank = ranks.iter().copied().max().unwrap_or(0);
    let mut counts = vec![0usize; max_rank + 1];
    for &r in &ranks {
        counts[r] += 1;
    }
    let mut fit = 0; // ranks 0..fit fit whole
    let mut taken = 0;
    while fit <= max_rank && taken + counts[fit] <= n_below {
        taken += counts[fit];
        fit += 1;
    }
    let mut below: Vec<usize> = (0..rows.len()).filter(|&i| ranks[i] < fit).collect();
    if below.len() < n_below {
        let tie: Vec<usize> = (0..rows.len()).filter(|&i| ranks[i] == fit).collect();
        let tie_rows: Vec<&[f64]> = tie.iter().map(|&i| rows[i]).collect();
        let reference = reference_point(&tie_rows);
        for k in solve_hssp(&tie_rows, n_below - below.len(), &reference) {
            below.push(tie[k]);
        }
    }
    below.sort_unstable();
    below
}

/// Optuna's `_get_reference_point`.
fn reference_point(rows: &[&[f64]]) -> Vec<f64> {
    let m = rows[0].len();
    (0..m)
        .map(|d| {
            let worst = rows.iter().map(|r| r[d]).fold(f64::NEG_INFINITY, f64::max);
            let r = (1.1 * worst).max(0.9 * worst);
            if r == 0.0 {
                1e-12
            } else {
                r
            }
        })
        .collect()
}

fn lex(a: &[f64], b: &[f64]) -> Ordering {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.partial_cmp(y).unwrap_or(Ordering::Equal))
        .find(|o| o.is_ne())
        .unwrap_or(Ordering::Equal)
}

/// Optuna's `_solve_hssp`: `subset_size` of `rows` (indices into it) chosen greedily by
/// hypervolume contribution. Copies of a row are only taken once every distinct row is.
fn solve_hssp(rows: &[&[f64]], subset_size: usize, reference: &[f64]) -> Vec<usize> {
    if subset_size >= rows.len() {
        return (0..rows.len()).collect();
    }
    // The distinct rows, lexsorted, each by its first occurrence (NumPy's return_index).
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&i, &j| lex(rows[i], rows[j]).then(i.cmp(&j)));
    let mut unique: Vec<usize> = Vec::new();
    for i in order {
        if unique
            .last()
            .is_none_or(|&u| lex(rows[u], rows[i]) != Ordering::Equal)
        {
            unique.push(i);
        }
    }
    if unique.len() < subset_size {
        // Every distinct row, then the first copies in the given order.
        let mut chosen = vec![false; rows.len()];
        for &u in &unique {
            chosen[u] = true;
        }
        let mut extra = subset_size - unique.len();
        for c in chosen.iter_mut() {
            if extra == 0 {
                break;
            }
            if !*c {
                *c = true;
                extra -= 1;
            }
        }
        return (0..rows.len()).filter(|&i| chosen[i]).collect();
    }
    if reference.iter().any(|r| !r.is_finite()) {
        return unique[..subset_size].to_vec();
    }
    if unique.len() == subset_size {
        return unique;
    }
    let points: Vec<&[f64]> = unique.iter().map(|&u| rows[u]).collect();
    let picked = if reference.len() == 2 {
        hssp_2d(&points, subset_size, reference)
    } else {
        hssp_greedy(&points, subset_size, reference)
    };
    picked.into_iter().map(|k| unique[k]).collect()
}

/// Optuna's `_solve_hssp_2d` on distinct lexsorted points of one rank (so sorted by the first
/// loss and, being mutually non-dominated, by the second in reverse): each point's contribution
/// is the rectangle between it and the corner the points taken so far leave it.
fn hssp_2d(points: &[&[f64]], subset_size: usize, reference: &[f64]) -> Vec<usize> {
    let mut left: Vec<usize> = (0..points.len()).collect();
    let mut diag: Vec<[f64; 2]> = vec![[reference[0], reference[1]]; points.len()];
    let mut picked = Vec::with_capacity(subset_size);
    for _ in 0..subset_size {
        let mut best = 0;
        let mut best_contrib = f64::NEG_INFINITY;
        for (k, &i) in left.iter().enumerate() {
            let c = (diag[k][0] - points[i][0]) * (diag[k][1] - points[i][1]);
            // First maximum, as np.argmax.
            if c > best_contrib {
                best = k;
                best_contrib = c;
            }
        }
        let chosen = left.remove(best);
        diag.remove(best);
        picked.push(chosen);
        let (x, y) = (points[chosen][0], points[chosen][1]);
        for d in &mut diag[..best] {
            d[0] = d[0].min(x);
        }
        for d in &mut diag[best..] {
            d[1] = d[1].min(y);
        }
    }
    picked
}

/// Greedy HSSP in any dimension: each step takes the point adding the most hypervolume (the
/// first of equals), as Optuna's lazily updated greedy does.
fn hssp_greedy(points: &[&[f64]], subset_size: usize, reference: &[f64]) -> Vec<usize> {
    let mut left: Vec<usize> = (0..points.len()).collect();
    let mut picked: Vec<usize> = Vec::with_capacity(subset_size);
    let mut chosen: Vec<&[f64]> = Vec::with_capacity(subset_size);
    for _ in 0..subset_size {
        let mut best = 0;
        let mut best_hv = f64::NEG_INFINITY;
        for (k, &i) in left.iter().enumerate() {
            let mut with: Vec<&[f64]> = chosen.clone();
            with.push(points[i]);
            let hv = hypervolume(&with, reference);
            if hv > best_hv {
                best = k;
                best_hv = hv;
            }
        }
        let i = left.remove(best);
        picked.push(i);
        chosen.push(points[i]);
    }
    picked
}

/// The hypervolume `points` (losses, each at most `reference`) dominate up to `reference`,
/// by slicing along the last objective. Exact; meant for the small sets HSSP compares.
pub(super) fn hypervolume(points: &[&[f64]], reference: &[f64]) -> f64 {
    let m = reference.len();
    if points.is_empty() {
        return 0.0;
    }
    if m == 1 {
        let best = points.iter().map(|p| p[0]).fold(f64::INFINITY, f64::min);
        return (reference[0] - best).max(0.0);
    }
    let mut sorted: Vec<&[f64]> = points.to_vec();
    sorted.sort_by(|a, b| a[m - 1].total_cmp(&b[m - 1]));
    let mut total = 0.0;
    for k in 0..sorted.len() {
        let top = if k + 1 < sorted.len() {
            sorted[k + 1][m - 1]
        } else {
            reference[m - 1]
        };
        let depth = top - sorted[k][m - 1];
        if depth <= 0.0 {
            continue;
        }
        let slice: Vec<&[f64]> = sorted[..=k].iter().map(|p| &p[..m - 1]).collect();
        total += depth * hypervolume(&slice, &reference[..m - 1]);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[Vec<f64>]) -> Vec<&[f64]> {
        v.iter().map(|r| &r[..]).collect()
    }

    #[test]
    fn gamma_has_no_cap() {
        assert_eq!([0, 1, 10, 11, 300, 1000].map(gamma), [0, 1, 1, 2, 30, 100]);
    }

    #[test]
    fn hypervolume_of_known_sets() {
        let v = vec![vec![1.0, 3.0], vec![2.0, 2.0], vec![3.0, 1.0]];
        // Staircase under (4, 4): 3*1 + 2*1 + 1*1.
        assert_eq!(hypervolume(&rows(&v), &[4.0, 4.0]), 6.0);
        // A dominated point adds nothing.
        let mut w = v.clone();
        w.push(vec![3.0, 3.0]);
        assert_eq!(hypervolume(&rows(&w), &[4.0, 4.0]), 6.0);
        let cube = vec![vec![0.0, 0.0, 0.0]];
        assert_eq!(hypervolume(&rows(&cube), &[2.0, 3.0, 4.0]), 24.0);
        let two = vec![vec![0.0, 1.0, 1.0], vec![1.0, 0.0, 1.0]];
        // 2*1*1 + 1*2*1 - overlap 1*1*1, times the z depth of 1.
        assert_eq!(hypervolume(&rows(&two), &[2.0, 2.0, 2.0]), 3.0);
    }

    #[test]
    fn reference_point_is_optunas() {
        let v = vec![vec![1.0, -2.0, 0.0], vec![2.0, -4.0, 0.0]];
        assert_eq!(reference_point(&rows(&v)), [2.2, -1.8, 1e-12]);
    }

    #[test]
    fn whole_ranks_first_then_the_cut_rank_by_hypervolume() {
        // Rank 0: trials 0 and 3. Rank 1: 1, 2, 4, 5 (mutually non-dominated).
        let v = vec![
            vec![0.0, 1.0],
            vec![1.0, 5.0],
            vec![2.0, 4.0],
            vec![1.0, 0.0],
            vec![4.0, 1.5],
            vec![5.0, 1.4],
        ];
        assert_eq!(select_below(&rows(&v), 2), [0, 3]);
        // One more from rank 1, reference (5.5, 5.5): the contributions are 4.5*0.5, 3.5*1.5,
        // 1.5*4.0 and 0.5*4.1: trial 4.
        assert_eq!(select_below(&rows(&v), 3), [0, 3, 4]);
        // Then trial 2 adds the most beside it.
        assert_eq!(select_below(&rows(&v), 4), [0, 2, 3, 4]);
        assert_eq!(select_below(&rows(&v), 6), [0, 1, 2, 3, 4, 5]);
        assert_eq!(select_below(&rows(&v), 0), Vec::<usize>::new());
    }

    #[test]
    fn greedy_hssp_in_2d_matches_the_general_greedy() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..50 {
            // A front: x increasing, y decreasing, distinct.
            let n = rng.gen_range(3..12);
            let mut xs: Vec<f64> = (0..n).map(|_| rng.gen::<f64>()).collect();
            xs.sort_by(f64::total_cmp);
            let pts: Vec<Vec<f64>> = xs.iter().map(|&x| vec![x, 1.0 - x * x]).collect();
            let r = rows(&pts);
            let reference = reference_point(&r);
            let k = rng.gen_range(1..n);
            let mut a = hssp_2d(&r, k, &reference);
            let mut b = hssp_greedy(&r, k, &reference);
            a.sort();
            b.sort();
            assert_eq!(a, b, "{pts:?} k={k}");
        }
    }

    #[test]
    fn copies_and_infinities() {
        // Two distinct rows, three wanted: both, then the first copy.
        let v = vec![
            vec![1.0, 2.0],
            vec![1.0, 2.0],
            vec![2.0, 1.0],
            vec![2.0, 1.0],
        ];
        assert_eq!(solve_hssp(&rows(&v), 3, &[3.0, 3.0]), [0, 1, 2]);
        // An infinite reference: the first in lexicographic order.
        let w = vec![vec![3.0, 0.0], vec![1.0, 2.0], vec![2.0, 1.0]];
        assert_eq!(solve_hssp(&rows(&w), 2, &[f64::INFINITY, 3.0]), [1, 2]);
    }

    /// What Optuna 5.0's multi-objective TPE did, written by `optuna_multi_golden.py` beside
    /// this file (see there).
    const OPTUNA_GOLDEN: &str = include_str!("optuna_multi_golden.json");

    fn golden() -> serde_json::Value {
        serde_json::from_str(OPTUNA_GOLDEN).unwrap()
    }

    fn floats(v: &serde_json::Value) -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap_or(f64::INFINITY))
            .collect()
    }

    /// Optuna's `_split_complete_trials_multi_objective` on 120 sets of rows with two or three
    /// objectives on a coarse grid (ties, copies, a rank cut by hypervolume; some infinite).
    #[test]
    fn below_is_optunas_on_ties_copies_and_infinities() {
        for (c, case) in golden()["split"].as_array().unwrap().iter().enumerate() {
            let v: Vec<Vec<f64>> = case["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(floats)
                .collect();
            let n_below = case["n_below"].as_u64().unwrap() as usize;
            let want: Vec<usize> = case["below"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(select_below(&rows(&v), n_below), want, "case {c}: {v:?}");
        }
    }

    /// Optuna's independent multi-objective TPE on whole studies (two and three objectives,
    /// some maximized, half the trials constrained and some of those infeasible): the trials
    /// below, and each param's `log l(x)` and `log g(x)` at a few points, to 1e-9. This covers
    /// the split as the sampler makes it (feasible trials by rank, then infeasible ones by
    /// violation, `gamma(n) = ceil(0.1 n)`) and the weights (below uniform, above fading).
    #[test]
    fn independent_scores_are_optunas() {
        use crate::sampler::testkit::seeded;
        use crate::sampler::tpe::model::Model;
        use crate::sampler::tpe::TpeSampler;
        use crate::sampler::Sampler;
        use crate::study::space::test_util::{cat, float, int, spec};
        use crate::study::{Direction, ParamValue, Params, SearchSpace, TrialRecord, TrialState};

        let space = SearchSpace {
            params: vec![
                spec("x", float(0.0, 1.0, None, false)),
                spec("lr", float(1e-4, 1e-1, None, true)),
                spec("n", int(1, 9, 2, false)),
                spec("s", float(0.0, 1.0, Some(0.25), false)),
                spec("c", cat(3)),
            ],
        };
        let to_params = |v: &serde_json::Value| -> Params {
            v.as_object()
                .unwrap()
                .iter()
                .map(|(k, x)| {
                    let p = match k.as_str() {
                        "n" => ParamValue::Int(x.as_i64().unwrap()),
                        "c" => ParamValue::Choice(x.as_u64().unwrap() as usize),
                        _ => ParamValue::Float(x.as_f64().unwrap()),
                    };
                    (k.clone(), p)
                })
                .collect()
        };
        for case in golden()["acquisition"].as_array().unwrap() {
            let directions: Vec<Direction> = case["directions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| match d.as_str().unwrap() {
                    "minimize" => Direction::Minimize,
                    _ => Direction::Maximize,
                })
                .collect();
            let mut s = TpeSampler::with_directions(&directions, seeded(0));
            let trials = case["trials"].as_array().unwrap();
            let xs: Vec<f64> = trials
                .iter()
                .map(|t| t["params"]["x"].as_f64().unwrap())
                .collect();
            for (k, t) in trials.iter().enumerate() {
                s.tell(&TrialRecord {
                    number: k as i64,
                    params: to_params(&t["params"]),
                    state: TrialState::Complete,
                    values: floats(&t["values"]),
                    constraints: floats(&t["constraints"]),
                    distributions: space
                        .params
                        .iter()
                        .map(|p| (p.name.clone(), p.dist.clone()))
                        .collect(),
                });
            }
            let what = format!("seed {}", case["seed"]);
            let (below, _) = s.split(None);
            // Trials below, named by their x (distinct floats).
            let x_model = [("x".to_owned(), Model::new(&space.params[0].dist))];
            let mut got: Vec<usize> = s
                .project(&x_model, &below)
                .iter()
                .map(|r| xs.iter().position(|&x| x == r[0]).unwrap())
                .collect();
            got.sort_unstable();
            let want: Vec<usize> = case["below"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(got, want, "{what}: trials below");
            let points: Vec<Params> = case["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(to_params)
                .collect();
            for p in &space.params {
                let model = Model::new(&p.dist);
                // What `suggest` builds for this param.
                let (l, g) = s.estimators(&[(p.name.clone(), model.clone())], None);
                // A point as a candidate: model coordinate, grid index or choice.
                let cands: Vec<f64> = points
                    .iter()
                    .map(|q| match (&model, &q[&p.name]) {
                        (Model::Numeric(num), v) => {
                            let x = match *v {
                                ParamValue::Float(x) => x,
                                ParamValue::Int(i) => i as f64,
                                ParamValue::Choice(_) => unreachable!(),
                            };
                            match num.grid {
                                Some(grid) => ((x - grid.low) / grid.step).round(),
                                None => num.coord(x),
                            }
                        }
                        (_, ParamValue::Choice(c)) => *c as f64,
                        _ => unreachable!(),
                    })
                    .collect();
                let scores = &case["scores"][&p.name];
                for (side, got, want) in [
                    ("below", l.log_pdf(&cands), floats(&scores["below"])),
                    ("above", g.log_pdf(&cands), floats(&scores["above"])),
                ] {
                    for (k, (got, want)) in got.iter().zip(&want).enumerate() {
                        assert!(
                            (got - want).abs() < 1e-9 * want.abs().max(1.0),
                            "{what} {} {side} at point {k}: {got} vs Optuna {want}",
                            p.name
                        );
                    }
                }
            }
        }
    }
}
