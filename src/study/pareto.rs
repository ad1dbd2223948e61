//! Several objectives: when one trial is better than another, which trials are Pareto-optimal,
//! and how the rest rank behind them, by Optuna 5.0's rules (`study/_multi_objective.py`), so
//! that `sweepd best` lists exactly `study.best_trials` and the samplers rank as Optuna's do.
//!
//! Everything here works on *losses*: each objective's value as "lower is better" (negated when
//! maximized), one row per trial. Values are never NaN here (a NaN result fails its trial as
//! `bad_value`); infinities are ordinary values.

use super::trial::Direction;
use std::cmp::Ordering;

/// A trial's values as losses: negated where the objective is maximized.
pub fn losses(values: &[f64], directions: &[Direction]) -> Vec<f64> {
    values
        .iter()
        .zip(directions)
        .map(|(v, d)| match d {
            Direction::Minimize => *v,
            Direction::Maximize => -*v,
        })
        .collect()
}

/// Optuna's `_dominates` on losses: `a` is nowhere worse than `b` and not equal to it.
pub fn dominates(a: &[f64], b: &[f64]) -> bool {
    a != b && a.iter().zip(b).all(|(x, y)| x <= y)
}

/// Optuna's feasibility: every constraint value is `<= 0` (none at all is feasible).
pub fn feasible(constraints: &[f64]) -> bool {
    constraints.iter().all(|c| *c <= 0.0)
}

/// The total violation Optuna ranks infeasible trials by: the sum of the positive constraints.
pub fn violation(constraints: &[f64]) -> f64 {
    constraints.iter().filter(|c| **c > 0.0).sum()
}

/// Lexicographic order of loss rows, equal values (`-0.0` and `0.0` too) comparing equal, as
/// NumPy's `unique(axis=0)` sorts them.
fn lex(a: &[f64], b: &[f64]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        match x.partial_cmp(y).unwrap_or(Ordering::Equal) {
            Ordering::Equal => continue,
            o => return o,
        }
    }
    Ordering::Equal
}

/// The distinct rows of `rows` in lexicographic order, and for each row its distinct row's index.
fn unique_lexsorted<'a>(rows: &[&'a [f64]]) -> (Vec<&'a [f64]>, Vec<usize>) {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by(|&i, &j| lex(rows[i], rows[j]));
    let mut unique: Vec<&[f64]> = Vec::new();
    let mut group = vec![0; rows.len()];
    for i in order {
        if unique
            .last()
            .is_none_or(|u| lex(u, rows[i]) != Ordering::Equal)
        {
            unique.push(rows[i]);
        }
        group[i] = unique.len() - 1;
    }
    (unique, group)
}

/// The front of distinct rows in lexicographic order (Optuna's `_is_pareto_front_for_unique_
/// sorted`): the first remaining row is never dominated by a later one, so it is on the front,
/// and only rows better than it somewhere past the first objective can still be.
fn front_of_unique_sorted(rows: &[&[f64]]) -> Vec<bool> {
    let mut on = vec![false; rows.len()];
    if rows.is_empty() {
        return on;
    }
    if rows[0].len() <= 1 {
        on[0] = true;
        return on;
    }
    let mut remaining: Vec<usize> = (0..rows.len()).collect();
    while let Some(&k) = remaining.first() {
        on[k] = true;
        remaining.retain(|&j| rows[j][1..].iter().zip(&rows[k][1..]).any(|(a, b)| a < b));
    }
    on
}

/// Which rows are on the Pareto front (not dominated by any other), as Optuna's
/// `_is_pareto_front`: rows equal to a front row are all on it.
pub fn pareto_front(rows: &[&[f64]]) -> Vec<bool> {
    let (unique, group) = unique_lexsorted(rows);
    let on = front_of_unique_sorted(&unique);
    group.into_iter().map(|g| on[g]).collect()
}

/// Optuna's `_calculate_nondomination_rank`: rank 0 for the front, 1 for the front of the rest,
/// and so on. Once at least `n_below` rows are ranked, every row left gets the next rank (only
/// the ranks up to the `n_below`-th best row are exact, as in Optuna).
fn nondomination_ranks(rows: &[&[f64]], n_below: usize) -> Vec<usize> {
    if rows.is_empty() || n_below == 0 {
        return vec![0; rows.len()];
    }
    let (unique, group) = unique_lexsorted(rows);
    let n_unique = unique.len();
    let mut ranks = vec![0; n_unique];
    if unique[0].len() == 1 {
        // One objective: the rank of each distinct value.
        return group;
    }
    let n_below = n_below.min(n_unique);
    let mut left: Vec<usize> = (0..n_unique).collect();
    let mut rank = 0;
    while n_unique - left.len() < n_below {
        let rows_left: Vec<&[f64]> = left.iter().map(|&i| unique[i]).collect();
        let on = front_of_unique_sorted(&rows_left);
        let mut next = Vec::with_capacity(left.len());
        for (k, &i) in left.iter().enumerate() {
            if on[k] {
                ranks[i] = rank;
            } else {
                next.push(i);
            }
        }
        left = next;
        rank += 1;
    }
    for i in left {
        ranks[i] = rank;
    }
    group.into_iter().map(|g| ranks[g]).collect()
}

/// Optuna's `_fast_non_domination_rank`: feasible rows (penalty `<= 0`, or no penalties at all)
/// ranked by non-domination, then the infeasible ones behind every feasible rank, by penalty
/// alone (their losses are not looked at). `n_below`: as in [`nondomination_ranks`]; `None`
/// ranks every row exactly.
pub fn fast_nondomination_ranks(
    rows: &[&[f64]],
    penalty: Option<&[f64]>,
    n_below: Option<usize>,
) -> Vec<usize> {
    let n_below = n_below.unwrap_or(rows.len());
    let Some(penalty) = penalty else {
        return nondomination_ranks(rows, n_below);
    };
    let feasible: Vec<usize> = (0..rows.len()).filter(|&i| penalty[i] <= 0.0).collect();
    let infeasible: Vec<usize> = (0..rows.len()).filter(|&i| penalty[i] > 0.0).collect();
    let mut ranks = vec![0; rows.len()];
    let feasible_rows: Vec<&[f64]> = feasible.iter().map(|&i| rows[i]).collect();
    let feasible_ranks = nondomination_ranks(&feasible_rows, n_below);
    for (&i, &r) in feasible.iter().zip(&feasible_ranks) {
        ranks[i] = r;
    }
    let top = feasible_ranks.iter().max().map_or(0, |r| r + 1);
    let penalties: Vec<[f64; 1]> = infeasible.iter().map(|&i| [penalty[i]]).collect();
    let penalty_rows: Vec<&[f64]> = penalties.iter().map(|p| &p[..]).collect();
    let left = n_below.saturating_sub(feasible.len());
    for (&i, &r) in infeasible
        .iter()
        .zip(&nondomination_ranks(&penalty_rows, left))
    {
        ranks[i] = top + r;
    }
    ranks
}

/// Optuna's `study.best_trials` over COMPLETE trials given in trial order as (values,
/// constraints): the indices of those on the Pareto front, in that order. In a constrained
/// study (`constrained`: some trial has constraints) only feasible trials compete. A trial
/// whose number of values is not the study's cannot be compared and is left out (Optuna
/// raises).
pub fn best_trials<'a>(
    trials: impl IntoIterator<Item = (&'a [f64], &'a [f64])>,
    directions: &[Direction],
    constrained: bool,
) -> Vec<usize> {
    let mut index = Vec::new();
    let mut rows = Vec::new();
    for (i, (values, constraints)) in trials.into_iter().enumerate() {
        if values.len() != directions.len() || (constrained && !feasible(constraints)) {
            continue;
        }
        index.push(i);
        rows.push(losses(values, directions));
    }
    let refs: Vec<&[f64]> = rows.iter().map(|r| &r[..]).collect();
    pareto_front(&refs)
        .into_iter()
        .zip(index)
        .filter_map(|(on, i)| on.then_some(i))
        .collect()
}

/// Per objective, the best value of the front (the best of all feasible COMPLETE trials): what
/// `status` and the metrics show. `None` per objective when there is no such trial.
pub fn best_per_objective<'a>(
    front: impl IntoIterator<Item = &'a [f64]>,
    directions: &[Direction],
) -> Vec<Option<f64>> {
    let mut best: Vec<Option<f64>> = vec![None; directions.len()];
    for values in front {
        for ((b, v), d) in best.iter_mut().zip(values).zip(directions) {
            if b.is_none_or(|b| d.better(*v, b)) {
                *b = Some(*v);
            }
        }
    }
    best
}

/// The Pareto front of the trials seen so far, kept as they complete (the progress display
/// and the metrics follow it without asking the database). Feasible COMPLETE trials only: the
/// caller leaves the others out.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Front {
    directions: Vec<Direction>,
    /// (trial number, values, losses), in the order they joined.
    members: Vec<(i64, Vec<f64>, Vec<f64>)>,
}

impl Front {
    pub fn new(directions: &[Direction]) -> Front {
        Front {
            directions: directions.to_vec(),
            members: Vec::new(),
        }
    }

    /// A trial completed with `values`: it joins the front unless a member dominates it, and
    /// the members it dominates leave. Values of the wrong count are ignored, and so is a trial
    /// inserted before (a daemon may read a trial from the database that it had already, see
    /// `supervisor::learn`).
    pub fn insert(&mut self, number: i64, values: &[f64]) {
        if values.len() != self.directions.len()
            || values.iter().any(|v| v.is_nan())
            || self.members.iter().any(|(n, _, _)| *n == number)
        {
            return;
        }
        let loss = losses(values, &self.directions);
        if self.members.iter().any(|(_, _, m)| dominates(m, &loss)) {
            return;
        }
        self.members.retain(|(_, _, m)| !dominates(&loss, m));
        self.members.push((number, values.to_vec(), loss));
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Per objective, the best value on the front.
    pub fn best(&self) -> Vec<Option<f64>> {
        best_per_objective(
            self.members.iter().map(|(_, v, _)| &v[..]),
            &self.directions,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[Vec<f64>]) -> Vec<&[f64]> {
        v.iter().map(|r| &r[..]).collect()
    }

    #[test]
    fn losses_negate_what_is_maximized() {
        let d = [Direction::Minimize, Direction::Maximize];
        assert_eq!(losses(&[1.0, 2.0], &d), [1.0, -2.0]);
        assert_eq!(
            losses(&[f64::INFINITY, f64::INFINITY], &d),
            [f64::INFINITY, f64::NEG_INFINITY]
        );
    }

    #[test]
    fn dominance_is_optunas() {
        assert!(dominates(&[1.0, 2.0], &[1.0, 3.0]));
        assert!(!dominates(&[1.0, 2.0], &[1.0, 2.0]), "equal rows do not");
        assert!(!dominates(&[1.0, 4.0], &[2.0, 3.0]));
        assert!(dominates(&[f64::NEG_INFINITY, 0.0], &[0.0, 0.0]));
    }

    #[test]
    fn feasibility_and_violation() {
        assert!(feasible(&[]));
        assert!(feasible(&[0.0, -1.0]));
        assert!(!feasible(&[0.0, 0.5]));
        // Optuna: `all(x <= 0.0)`: a NaN constraint is not satisfied.
        assert!(!feasible(&[f64::NAN]));
        assert_eq!(violation(&[2.0, -1.0, 0.5]), 2.5);
    }

    #[test]
    fn front_keeps_every_copy_of_a_front_point_in_the_given_order() {
        let v = vec![
            vec![3.0, 1.0],
            vec![1.0, 3.0],
            vec![2.0, 2.0],
            vec![2.0, 3.0], // dominated by (2, 2)
            vec![1.0, 3.0], // a copy of a front point
            vec![4.0, 4.0],
            vec![0.0, 0.0 + 5.0],
        ];
        assert_eq!(
            pareto_front(&rows(&v)),
            [true, true, true, false, true, false, true]
        );
        assert!(pareto_front(&[]).is_empty());
        // One objective: the minimum, every copy of it.
        let one = vec![vec![2.0], vec![1.0], vec![1.0], vec![3.0]];
        assert_eq!(pareto_front(&rows(&one)), [false, true, true, false]);
    }

    #[test]
    fn front_in_three_objectives_and_with_infinities() {
        let v = vec![
            vec![1.0, 2.0, 3.0],
            vec![2.0, 1.0, 3.0],
            vec![1.0, 2.0, 4.0], // dominated by the first
            vec![3.0, 3.0, 0.0],
            vec![f64::INFINITY, f64::NEG_INFINITY, 9.0],
            vec![f64::INFINITY, f64::INFINITY, 9.0], // dominated by the one before
        ];
        assert_eq!(
            pareto_front(&rows(&v)),
            [true, true, false, true, true, false]
        );
    }

    /// Front by the definition: no other row dominates it.
    fn brute_front(v: &[&[f64]]) -> Vec<bool> {
        v.iter()
            .map(|a| !v.iter().any(|b| dominates(b, a)))
            .collect()
    }

    #[test]
    fn front_and_ranks_agree_with_the_definition() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for m in 2..=4 {
            for _ in 0..30 {
                let n = rng.gen_range(1..40);
                // Few distinct values, so that ties and copies are common.
                let v: Vec<Vec<f64>> = (0..n)
                    .map(|_| (0..m).map(|_| rng.gen_range(0..5) as f64).collect())
                    .collect();
                let r = rows(&v);
                assert_eq!(pareto_front(&r), brute_front(&r), "{v:?}");
                // Ranks: peel fronts by the definition.
                let ranks = fast_nondomination_ranks(&r, None, None);
                let mut left: Vec<usize> = (0..n).collect();
                let mut rank = 0;
                while !left.is_empty() {
                    let lr: Vec<&[f64]> = left.iter().map(|&i| r[i]).collect();
                    let on = brute_front(&lr);
                    for (k, &i) in left.iter().enumerate() {
                        if on[k] {
                            assert_eq!(ranks[i], rank, "{v:?}");
                        }
                    }
                    left = left
                        .into_iter()
                        .zip(on)
                        .filter(|(_, o)| !o)
                        .map(|(i, _)| i)
                        .collect();
                    rank += 1;
                }
            }
        }
    }

    #[test]
    fn best_trials_is_the_feasible_front_in_trial_order() {
        use Direction::{Maximize, Minimize};
        let d = [Minimize, Maximize];
        let values = [
            vec![1.0, 1.0],
            vec![2.0, 3.0],
            vec![0.5, 0.0],
            vec![0.0, 9.0], // infeasible: dominates every other, but does not count
            vec![2.0, 2.0], // dominated by trial 1
            vec![1.0],      // wrong count: left out
        ];
        let constraints: [Vec<f64>; 6] = [vec![], vec![-1.0], vec![0.0], vec![1.0], vec![], vec![]];
        let pairs = || {
            values
                .iter()
                .zip(&constraints)
                .map(|(v, c)| (&v[..], &c[..]))
        };
        assert_eq!(best_trials(pairs(), &d, true), [0, 1, 2]);
        // Unconstrained, the infeasible trial's values dominate everyone else's.
        assert_eq!(best_trials(pairs(), &d, false), [3]);
        let front = best_trials(pairs(), &d, true);
        let best = best_per_objective(front.iter().map(|&i| &values[i][..]), &d);
        assert_eq!(best, [Some(0.5), Some(3.0)]);
        assert_eq!(best_per_objective([], &d), [None, None]);
    }

    #[test]
    fn front_kept_as_trials_complete_matches_the_front_of_all() {
        use rand::{Rng, SeedableRng};
        let d = [
            Direction::Minimize,
            Direction::Maximize,
            Direction::Minimize,
        ];
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        let values: Vec<Vec<f64>> = (0..200)
            .map(|_| (0..3).map(|_| rng.gen_range(0..8) as f64).collect())
            .collect();
        let mut front = Front::new(&d);
        for (i, v) in values.iter().enumerate() {
            front.insert(i as i64, v);
        }
        front.insert(999, &[1.0]);
        let none: Vec<f64> = vec![];
        let all = best_trials(values.iter().map(|v| (&v[..], &none[..])), &d, false);
        let mut kept: Vec<i64> = front.members.iter().map(|m| m.0).collect();
        kept.sort();
        assert_eq!(kept, all.iter().map(|&i| i as i64).collect::<Vec<_>>());
        let want = best_per_objective(all.iter().map(|&i| &values[i][..]), &d);
        assert_eq!(front.best(), want);
        assert_eq!(front.best(), [Some(0.0), Some(7.0), Some(0.0)]);
    }

    #[test]
    fn a_trial_read_twice_is_on_the_front_once() {
        let d = [Direction::Minimize, Direction::Minimize];
        let mut front = Front::new(&d);
        front.insert(1, &[1.0, 2.0]);
        front.insert(2, &[2.0, 1.0]);
        front.insert(1, &[1.0, 2.0]);
        assert_eq!(front.len(), 2);
    }

    #[test]
    fn ranks_stop_being_exact_past_n_below() {
        // Five fronts of one point each.
        let v: Vec<Vec<f64>> = (0..5).map(|i| vec![i as f64, i as f64]).collect();
        assert_eq!(
            fast_nondomination_ranks(&rows(&v), None, Some(2)),
            [0, 1, 2, 2, 2]
        );
        assert_eq!(
            fast_nondomination_ranks(&rows(&v), None, None),
            [0, 1, 2, 3, 4]
        );
    }

    #[test]
    fn infeasible_rows_rank_behind_by_penalty_alone() {
        let v = vec![
            vec![5.0, 5.0],
            vec![0.0, 0.0], // best values, but infeasible
            vec![1.0, 6.0],
            vec![9.0, 9.0],
            vec![0.0, 1.0], // infeasible, less violated
        ];
        let penalty = [0.0, 2.0, -1.0, 0.0, 1.0];
        assert_eq!(
            fast_nondomination_ranks(&rows(&v), Some(&penalty), None),
            [0, 3, 0, 1, 2]
        );
        // No feasible row: ranks start at 0.
        let all_bad = [1.0, 2.0, 1.0, 3.0, 2.0];
        assert_eq!(
            fast_nondomination_ranks(&rows(&v), Some(&all_bad), None),
            [0, 1, 0, 2, 1]
        );
    }
}
