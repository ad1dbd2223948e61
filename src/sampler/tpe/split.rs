//! TPE's history and its split into "below" (good) and "above" (the rest), Optuna's
//! `_split_trials`: the rule is in the module docs of [`super`] ("split", "constant liar",
//! "constraints", "bounded cost").
//!
//! The history keeps every finished trial as one row of its params (as interned name ids, so
//! that trials with different params, a define-by-run study's branches, sit side by side), plus
//! a set of them in rank order kept as trials are told, so that a long history's best are read
//! off its first entries instead of re-ranking the study for every proposal.

use super::multi;
use crate::study::ParamValue;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// One param of a trial: its name's id (see `super::Names`) and its value.
pub(super) type Cell = (u32, ParamValue);

/// A trial's params, sorted by name id.
pub(super) type Row = Box<[Cell]>;

/// The value of name `id` in a row, if the trial has that param.
pub(super) fn lookup(row: &[Cell], id: u32) -> Option<&ParamValue> {
    row.binary_search_by_key(&id, |c| c.0)
        .ok()
        .map(|i| &row[i].1)
}

/// Past this many finished trials, "above" keeps only the newest this many (see the module
/// docs of [`super`]): a proposal then costs the same at 100,000 trials as at 1,000.
pub const HISTORY_WINDOW: usize = 1000;

/// Where a finished trial ranks in the split.
#[derive(Debug, Clone)]
pub(super) enum Rank {
    /// Feasible COMPLETE: the objective as a loss (negated when maximizing, NaN as +inf).
    Complete(f64),
    /// Feasible COMPLETE in a study with several objectives: one loss per objective.
    Front(Box<[f64]>),
    /// Feasible PRUNED: the last intermediate value as a loss; `None` = pruned without one.
    Pruned(Option<f64>),
    /// Some constraint > 0. `counted`: COMPLETE or PRUNED (counts in `n` and the startup).
    Infeasible { violation: f64, counted: bool },
}

/// A finished trial as the split needs it.
struct Finished {
    number: i64,
    row: Row,
    rank: Rank,
}

impl Finished {
    /// Whether the trial counts in `n` (COMPLETE or PRUNED, feasible or not).
    fn counts(&self) -> bool {
        !matches!(self.rank, Rank::Infeasible { counted: false, .. })
    }
}

/// A finished trial's place in the split order: complete by loss, then pruned by last value
/// (those without one last), then infeasible by violation; ties by trial number.
#[derive(Debug, Clone, Copy)]
struct RankKey {
    class: u8,
    missing: bool,
    key: f64,
    number: i64,
}

impl RankKey {
    fn of(f: &Finished) -> RankKey {
        let (class, missing, key) = match f.rank {
            Rank::Complete(loss) => (0, false, loss),
            // Not ranked by one number: the split of several objectives ranks them itself.
            Rank::Front(_) => (0, false, 0.0),
            Rank::Pruned(l) => (1, l.is_none(), l.unwrap_or(0.0)),
            Rank::Infeasible { violation, .. } => (2, false, violation),
        };
        RankKey {
            class,
            missing,
            key,
            number: f.number,
        }
    }
}

impl Ord for RankKey {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.class
            .cmp(&o.class)
            .then(self.missing.cmp(&o.missing))
            .then(self.key.total_cmp(&o.key))
            .then(self.number.cmp(&o.number))
    }
}

impl PartialOrd for RankKey {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl PartialEq for RankKey {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}

impl Eq for RankKey {}

/// Rows of the history by trial number, before the split's last step.
type Rows<'a> = Vec<(i64, &'a [Cell])>;

/// Optuna's `default_gamma`: how many trials go below.
fn default_gamma(n: usize) -> usize {
    ((0.1 * n as f64).ceil() as usize).min(25)
}

/// The trials TPE learns from: finished ones with their rank, and running ones (observed, not
/// yet told) for the constant liar.
#[derive(Default)]
pub(super) struct History {
    finished: Vec<Finished>,
    /// How many of `finished` count in `n` (kept, not recounted on every proposal).
    counted: usize,
    /// Every finished trial in split order, kept as trials are told.
    ranked: BTreeSet<RankKey>,
    /// Trial number -> index into `finished`.
    finished_at: HashMap<i64, usize>,
    /// Observed, not yet finished: the constant liar's trials.
    running: BTreeMap<i64, Row>,
}

impl History {
    /// Trials that count in `n` (COMPLETE or PRUNED, feasible or not).
    pub(super) fn n_counted(&self) -> usize {
        self.counted
    }

    pub(super) fn is_finished(&self, number: i64) -> bool {
        self.finished_at.contains_key(&number)
    }

    /// A trial exists and has not finished: one of the constant liar's.
    pub(super) fn run(&mut self, number: i64, row: Row) {
        self.running.insert(number, row);
    }

    /// Drops a finished trial (it is running again, or told anew).
    pub(super) fn forget(&mut self, number: i64) {
        if let Some(i) = self.finished_at.remove(&number) {
            if self.finished[i].counts() {
                self.counted -= 1;
            }
            self.ranked.remove(&RankKey::of(&self.finished[i]));
            self.finished.swap_remove(i);
            if let Some(moved) = self.finished.get(i) {
                self.finished_at.insert(moved.number, i);
            }
        }
    }

    /// A trial finished: it stops running, and joins the finished ones if it ranks (`None`: a
    /// FAIL trial TPE ignores).
    pub(super) fn finish(&mut self, number: i64, ranked: Option<(Rank, Row)>) {
        self.running.remove(&number);
        self.forget(number);
        if let Some((rank, row)) = ranked {
            self.finished_at.insert(number, self.finished.len());
            let f = Finished { number, row, rank };
            if f.counts() {
                self.counted += 1;
            }
            self.ranked.insert(RankKey::of(&f));
            self.finished.push(f);
        }
    }

    /// Optuna's `_split_trials`: history rows below and above, each in trial-number order.
    /// `current`: the trial the proposal is for, left out of the running ones as in Optuna.
    /// `constant_liar`: the running trials join "above".
    pub(super) fn split(
        &self,
        current: Option<i64>,
        constant_liar: bool,
    ) -> (Vec<&[Cell]>, Vec<&[Cell]>) {
        let (below, above) = if self.finished.len() > HISTORY_WINDOW {
            self.rank_windowed()
        } else {
            self.rank_all()
        };
        self.finish_split(below, above, current, constant_liar)
    }

    /// [`Self::split`] for a study with several objectives (see [`super::multi`]): the
    /// feasible COMPLETE trials by non-domination rank and hypervolume, then pruned and
    /// infeasible ones as with one objective. Past [`HISTORY_WINDOW`] finished trials, "above"
    /// keeps the newest of the rest, as with one objective.
    pub(super) fn split_multi(
        &self,
        current: Option<i64>,
        constant_liar: bool,
    ) -> (Vec<&[Cell]>, Vec<&[Cell]>) {
        let mut n_below = multi::gamma(self.n_counted());
        let front: Vec<&Finished> = self
            .finished
            .iter()
            .filter(|f| matches!(f.rank, Rank::Front(_)))
            .collect();
        // In trial order, as Optuna reads the study's trials.
        let mut front = front;
        front.sort_by_key(|f| f.number);
        let rows: Vec<&[f64]> = front
            .iter()
            .map(|f| match &f.rank {
                Rank::Front(l) => &l[..],
                _ => unreachable!("filtered"),
            })
            .collect();
        let chosen = multi::select_below(&rows, n_below);
        n_below -= chosen.len();
        let mut best: HashSet<i64> = chosen.iter().map(|&i| front[i].number).collect();
        // Then the rest in split order (pruned by value, then infeasible by violation).
        for k in self.ranked.iter().filter(|k| k.class > 0).take(n_below) {
            best.insert(k.number);
        }
        fn row(f: &Finished) -> (i64, &[Cell]) {
            (f.number, &f.row[..])
        }
        let below: Rows = self
            .finished
            .iter()
            .filter(|f| best.contains(&f.number))
            .map(row)
            .collect();
        let above: Rows = self
            .finished
            .iter()
            .rev()
            .filter(|f| !best.contains(&f.number))
            .take(HISTORY_WINDOW)
            .map(row)
            .collect();
        self.finish_split(below, above, current, constant_liar)
    }

    /// Every finished trial ranked: the best `gamma(n)` below, the rest above.
    fn rank_all(&self) -> (Rows<'_>, Rows<'_>) {
        let mut complete = Vec::new();
        let mut pruned = Vec::new();
        let mut infeasible = Vec::new();
        for f in &self.finished {
            match f.rank {
                Rank::Complete(loss) => complete.push((f, loss)),
                Rank::Front(_) => unreachable!("split_multi ranks several objectives"),
                Rank::Pruned(loss) => pruned.push((f, loss)),
                Rank::Infeasible { violation, .. } => infeasible.push((f, violation)),
            }
        }
        let mut n_below = default_gamma(self.n_counted());
        let by_number = |a: &Finished, b: &Finished| a.number.cmp(&b.number);
        complete.sort_by(|a, b| a.1.total_cmp(&b.1).then(by_number(a.0, b.0)));
        // Pruned without an intermediate value rank last, as Optuna's score (1, 0.0).
        let pruned_key = |l: Option<f64>| (l.is_none(), l.unwrap_or(0.0));
        pruned.sort_by(|a, b| {
            let (ka, kb) = (pruned_key(a.1), pruned_key(b.1));
            ka.0.cmp(&kb.0)
                .then(ka.1.total_cmp(&kb.1))
                .then(by_number(a.0, b.0))
        });
        infeasible.sort_by(|a, b| a.1.total_cmp(&b.1).then(by_number(a.0, b.0)));

        let mut below: Rows = Vec::new();
        let mut above: Rows = Vec::new();
        let ranked = complete
            .iter()
            .map(|(f, _)| *f)
            .chain(pruned.iter().map(|(f, _)| *f))
            .chain(infeasible.iter().map(|(f, _)| *f));
        for f in ranked {
            if n_below > 0 {
                below.push((f.number, &f.row));
                n_below -= 1;
            } else {
                above.push((f.number, &f.row));
            }
        }
        (below, above)
    }

    /// The ranking of a long history in linear time: the best `gamma(n)` of all trials go below
    /// (selection, in the same rank order as [`Self::rank_all`]), the newest `HISTORY_WINDOW` of
    /// the rest above.
    fn rank_windowed(&self) -> (Rows<'_>, Rows<'_>) {
        let n_below = default_gamma(self.n_counted()).min(self.finished.len());
        // `ranked` keeps every finished trial in split order: the best are its first entries.
        let best: HashSet<i64> = self.ranked.iter().take(n_below).map(|k| k.number).collect();
        let row = |number: i64| {
            let f = &self.finished[self.finished_at[&number]];
            (f.number, &f.row[..])
        };
        let below: Rows = best.iter().map(|n| row(*n)).collect();
        // The newest told trials of the rest (`finished` is in the order trials were told).
        let above: Rows = self
            .finished
            .iter()
            .rev()
            .filter(|f| !best.contains(&f.number))
            .take(HISTORY_WINDOW)
            .map(|f| (f.number, &f.row[..]))
            .collect();
        (below, above)
    }

    /// The split's last step, shared by both ways of ranking: the constant liar's running
    /// trials join "above", and both groups go in trial-number order.
    fn finish_split<'a>(
        &'a self,
        mut below: Rows<'a>,
        mut above: Rows<'a>,
        current: Option<i64>,
        constant_liar: bool,
    ) -> (Vec<&'a [Cell]>, Vec<&'a [Cell]>) {
        if constant_liar {
            above.extend(
                self.running
                    .iter()
                    .filter(|(n, _)| Some(**n) != current)
                    .map(|(n, c)| (*n, &c[..])),
            );
        }
        below.sort_by_key(|r| r.0);
        above.sort_by_key(|r| r.0);
        (
            below.into_iter().map(|r| r.1).collect(),
            above.into_iter().map(|r| r.1).collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SamplerConfig;
    use crate::sampler::testkit::{record, seeded, x_space, xp};
    use crate::sampler::tpe::TpeSampler;
    use crate::sampler::{RandomSampler, Sampler};
    use crate::study::{Direction, Params, TrialRecord, TrialState};

    /// Optuna 5.0's `_split_trials` on studies whose trials set constraints
    /// (`optuna_constrained_golden.py` writes it): feasible trials first, infeasible ones by
    /// total violation, and sweepd puts the same trials below.
    #[test]
    fn the_constrained_split_is_optunas() {
        let golden: serde_json::Value =
            serde_json::from_str(include_str!("optuna_constrained_golden.json")).unwrap();
        let x_of = |n: i64| n as f64 * 0.1 - 9.0;
        for (i, case) in golden["cases"].as_array().unwrap().iter().enumerate() {
            let direction = match case["direction"].as_str().unwrap() {
                "minimize" => Direction::Minimize,
                _ => Direction::Maximize,
            };
            let mut s = TpeSampler::new(direction, seeded(0));
            for t in case["trials"].as_array().unwrap() {
                let number = t["number"].as_i64().unwrap();
                let keyed = t["constraints"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_f64().unwrap()))
                    .collect();
                let mut r = record(
                    number,
                    &xp(x_of(number)),
                    t["value"].as_f64().unwrap(),
                    vec![],
                );
                r.constraints = crate::study::constraint_values(&keyed, &[]);
                if t["state"] == "PRUNED" {
                    r.state = TrialState::Pruned;
                }
                s.tell(&r);
            }
            let below: Vec<i64> = s
                .split_coords(&x_space(), None)
                .0
                .iter()
                .map(|r| ((r[0] + 9.0) / 0.1).round() as i64)
                .collect();
            let want: Vec<i64> = case["below"]
                .as_array()
                .unwrap()
                .iter()
                .map(|n| n.as_i64().unwrap())
                .collect();
            assert_eq!(below, want, "case {i}");
        }
    }

    #[test]
    fn gamma_is_optunas() {
        let g: Vec<usize> = [0, 1, 10, 11, 30, 249, 250, 1000]
            .iter()
            .map(|&n| default_gamma(n))
            .collect();
        assert_eq!(g, [0, 1, 1, 2, 3, 25, 25, 25]);
    }

    #[test]
    fn split_ranks_complete_then_pruned_then_infeasible() {
        let mut s = TpeSampler::new(Direction::Minimize, seeded(0));
        let below = |s: &TpeSampler| -> Vec<f64> {
            s.split_coords(&x_space(), None)
                .0
                .iter()
                .map(|r| r[0])
                .collect()
        };
        // x encodes the trial number.
        let pruned = |n: i64, v: Option<f64>| TrialRecord {
            number: n,
            params: xp(n as f64),
            state: TrialState::Pruned,
            values: v.into_iter().collect(),
            constraints: vec![],
            distributions: Default::default(),
        };
        s.tell(&record(0, &xp(0.0), 5.0, vec![]));
        s.tell(&pruned(1, Some(-100.0)));
        s.tell(&record(2, &xp(2.0), -50.0, vec![0.5]));
        s.tell(&pruned(3, None));
        s.tell(&pruned(4, Some(1.0)));
        // n = 5: one below, the complete trial even though others have better values.
        assert_eq!(below(&s), [0.0]);
        for n in 5..16 {
            s.tell(&pruned(n, Some(n as f64)));
        }
        // n = 16: two below; then the best pruned trial.
        assert_eq!(below(&s), [0.0, 1.0]);
        for n in 16..21 {
            s.tell(&pruned(n, None));
        }
        // n = 21: three below.
        assert_eq!(below(&s), [0.0, 1.0, 4.0]);
        // Only infeasible and value-less pruned trials left after 16 more: infeasible last.
        let mut s2 = TpeSampler::new(Direction::Maximize, seeded(0));
        s2.tell(&record(0, &xp(0.0), 1.0, vec![3.0]));
        s2.tell(&record(1, &xp(1.0), 1.0, vec![0.0, 2.0, -1.0]));
        s2.tell(&pruned(2, None));
        s2.tell(&record(3, &xp(3.0), 1.0, vec![]));
        s2.tell(&pruned(4, Some(9.0)));
        s2.tell(&pruned(5, Some(10.0)));
        for n in 6..21 {
            s2.tell(&record(n, &xp(n as f64), 1.0, vec![1.0 + n as f64]));
        }
        // n = 21 -> 3 below: the complete, the best pruned (maximizing), the other pruned.
        assert_eq!(below(&s2), [3.0, 4.0, 5.0]);
        s2.tell(&TrialRecord {
            number: 3,
            params: xp(3.0),
            state: TrialState::Fail,
            values: vec![],
            constraints: vec![],
            distributions: Default::default(),
        });
        s2.tell(&TrialRecord {
            number: 4,
            params: xp(4.0),
            state: TrialState::Fail,
            values: vec![],
            constraints: vec![],
            distributions: Default::default(),
        });
        // n = 19 -> 2 below: pruned 5, then pruned-without-value 2 before the infeasible.
        assert_eq!(below(&s2), [2.0, 5.0]);
        for n in [5, 2] {
            s2.tell(&TrialRecord {
                number: n,
                params: xp(n as f64),
                state: TrialState::Fail,
                values: vec![],
                constraints: vec![],
                distributions: Default::default(),
            });
        }
        // n = 17 -> 2 below: the least violated (1: 2.0; 0: 3.0), in number order.
        assert_eq!(below(&s2), [0.0, 1.0]);
    }

    #[test]
    fn running_trials_go_above_only_with_constant_liar() {
        for liar in [true, false] {
            let settings = SamplerConfig {
                constant_liar: liar,
                ..seeded(0)
            };
            let mut s = TpeSampler::new(Direction::Minimize, settings);
            for n in 0..10 {
                s.tell(&record(n, &xp(n as f64), n as f64, vec![]));
            }
            s.observe(10, &xp(-3.0));
            s.observe(11, &Params::new());
            s.observe(3, &xp(7.0)); // already finished: ignored
            let above: Vec<f64> = s
                .split_coords(&x_space(), None)
                .1
                .iter()
                .map(|r| r[0])
                .collect();
            let mut want: Vec<f64> = (1..10).map(|n| n as f64).collect();
            if liar {
                want.extend([-3.0, f64::NAN]);
            }
            assert_eq!(format!("{above:?}"), format!("{want:?}"));
            // The trial being proposed for is not its own liar.
            let n_above = s.split_coords(&x_space(), Some(10)).1.len();
            assert_eq!(n_above, if liar { 10 } else { 9 });
            s.tell(&record(10, &xp(-3.0), -1.0, vec![]));
            s.tell(&record(11, &xp(1.5), 1.5, vec![]));
            assert_eq!(s.split_coords(&x_space(), None).0.len(), 2);
            assert_eq!(s.split_coords(&x_space(), None).1.len(), 10);
            assert!(s.history.running.is_empty());
        }
    }

    #[test]
    fn fail_trials_count_only_when_infeasible() {
        let space = x_space();
        let mut s = TpeSampler::new(Direction::Minimize, seeded(9));
        let fail = |n: i64, c: Vec<f64>| TrialRecord {
            number: n,
            params: xp(n as f64 - 5.0),
            state: TrialState::Fail,
            values: vec![],
            constraints: c,
            distributions: Default::default(),
        };
        for n in 0..9 {
            s.tell(&record(n, &xp(n as f64), 1.0, vec![]));
        }
        s.tell(&fail(9, vec![]));
        s.tell(&fail(10, vec![1.0]));
        assert_eq!(s.history.finished.len(), 10);
        assert_eq!(s.history.n_counted(), 9);
        // Still in startup: the proposal is the random sampler's.
        let random = RandomSampler::new(Some(9)).sample(&space, &Params::new(), 77);
        assert_eq!(s.sample(&space, &Params::new(), 77), random);
        s.tell(&record(11, &xp(1.0), 1.0, vec![]));
        assert_ne!(s.sample(&space, &Params::new(), 77), random);
        assert_eq!(s.split_coords(&x_space(), None).1.len(), 10);
    }

    #[test]
    fn long_history_split_keeps_the_best_of_all_and_a_window_of_the_rest() {
        let space = x_space();
        let mut s = TpeSampler::new(Direction::Minimize, seeded(1));
        let n = 3 * HISTORY_WINDOW as i64;
        let mut values = Vec::new();
        for i in 0..n {
            // Values scattered so that the best ones are old and new alike.
            let v = ((i * 7919) % 1009) as f64 + (i as f64) * 1e-6;
            values.push((v, i));
            s.tell(&record(i, &xp((i % 20) as f64 - 10.0), v, vec![]));
        }
        let (below, above) = s.split_coords(&x_space(), None);
        let gamma = default_gamma(n as usize);
        assert_eq!(below.len(), gamma);
        assert_eq!(above.len(), HISTORY_WINDOW);
        // Below: exactly the gamma best of all trials, in trial order.
        values.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut best: Vec<i64> = values[..gamma].iter().map(|v| v.1).collect();
        best.sort();
        let expect: Vec<Box<[f64]>> = best
            .iter()
            .map(|i| TpeSampler::coords(&x_space(), &xp((i % 20) as f64 - 10.0)))
            .collect();
        for (b, e) in below.iter().zip(&expect) {
            assert_eq!(&b[..], &e[..]);
        }
        // Proposals stay in the domain with the long history.
        for k in 0..20u64 {
            let p = s.sample(&space, &Params::new(), n as u64 + k).unwrap();
            assert!(space.params[0].dist.contains(&p["x"]));
        }
    }
}
