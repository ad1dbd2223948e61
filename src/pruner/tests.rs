use super::median::nanpercentile_sorted;
use super::*;

fn median(n_startup_trials: usize, n_warmup_steps: i64, interval_steps: i64) -> PrunerKind {
    PrunerKind::Median {
        n_startup_trials,
        n_warmup_steps,
        interval_steps,
    }
}

fn asha(min_resource: i64, reduction_factor: u32, mesr: u32) -> PrunerKind {
    PrunerKind::Asha {
        min_resource,
        reduction_factor,
        min_early_stopping_rate: mesr,
    }
}

/// Runs and completes trials `0..values.len()`, trial `i` reporting `values[i]` at every step
/// in `0..steps`.
fn complete(p: &mut Pruner, values: &[f64], steps: i64) {
    for (i, v) in values.iter().enumerate() {
        for s in 0..steps {
            p.report(i as i64, s, *v);
        }
        p.finish(i as i64, true);
    }
}

#[test]
fn none_never_prunes() {
    let mut p = Pruner::new(PrunerKind::None, Direction::Minimize, "study");
    for t in 0..10 {
        p.load(t, true, &[(0, 0.0), (1, 0.0)]);
    }
    assert!(!p.report(100, 0, f64::NAN));
    assert!(!p.report(100, 1, 1e9));
    p.finish(100, false);
    assert!(p.running.is_empty() && p.finished.is_empty());
}

#[test]
fn median_waits_for_startup_trials() {
    let mut p = Pruner::new(median(5, 0, 1), Direction::Minimize, "study");
    complete(&mut p, &[1.0, 1.0, 1.0, 1.0], 3);
    // Four completed: a terrible value is not pruned.
    assert!(!p.report(10, 0, 100.0));
    // Pruned and failed trials do not count.
    p.finish(10, false);
    assert!(!p.report(11, 0, 100.0));
    p.finish(11, false);
    assert!(!p.report(12, 0, 100.0));
    // The fifth completion enables pruning.
    p.load(4, true, &[(0, 1.0), (1, 1.0), (2, 1.0)]);
    assert!(p.report(12, 1, 100.0));
}

#[test]
fn median_prunes_worse_than_median_keeps_better() {
    let mut p = Pruner::new(median(5, 0, 1), Direction::Minimize, "study");
    complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 3);
    // Median at every step is 3.0.
    assert!(p.report(10, 0, 3.5));
    assert!(!p.report(11, 0, 2.5));
    // Equal to the median is not pruned (strict `>`).
    assert!(!p.report(12, 0, 3.0));
    // Optuna compares the trial's best so far: a bad step after a good one is not pruned.
    assert!(!p.report(11, 1, 10.0));
    // A step no completed trial reported has no median: no pruning.
    assert!(!p.report(13, 7, 100.0));
}

#[test]
fn median_uses_value_at_exact_step_and_interpolates() {
    let mut p = Pruner::new(median(1, 0, 1), Direction::Minimize, "study");
    // Step 2 has 1.0 and 2.0 (median 1.5); trial 2 never reported step 2.
    p.load(0, true, &[(0, 9.0), (2, 1.0)]);
    p.load(1, true, &[(0, 9.0), (2, 2.0)]);
    p.load(2, true, &[(0, 9.0), (1, 0.0)]);
    assert!(p.report(10, 2, 1.6));
    assert!(!p.report(11, 2, 1.5));
    // A NaN value of a completed trial counts as a report but not in the percentile.
    p.load(3, true, &[(3, f64::NAN), (4, f64::NAN)]);
    p.load(4, true, &[(3, 5.0)]);
    assert!(p.report(12, 3, 5.5));
    assert!(!p.report(13, 3, 5.0));
    // Only NaN at a step: nanpercentile is NaN, no pruning.
    assert!(!p.report(14, 4, 1e9));
}

#[test]
fn median_respects_warmup() {
    let mut p = Pruner::new(median(5, 3, 1), Direction::Minimize, "study");
    complete(&mut p, &[1.0, 1.0, 1.0, 1.0, 1.0], 6);
    assert!(!p.report(10, 0, 9.0));
    assert!(!p.report(10, 1, 9.0));
    assert!(!p.report(10, 2, 9.0));
    assert!(p.report(10, 3, 9.0));
}

#[test]
fn median_respects_interval() {
    // warmup 1, interval 3: checks in windows [1,4), [4,7), ... at the first report in each.
    let mut p = Pruner::new(median(5, 1, 3), Direction::Minimize, "study");
    complete(&mut p, &[1.0, 1.0, 1.0, 1.0, 1.0], 12);
    let decisions: Vec<bool> = (0..9).map(|s| p.report(10, s, 9.0)).collect();
    assert_eq!(
        decisions,
        [false, true, false, false, true, false, false, true, false]
    );
    // A window's start missed: the check happens at the first report inside the window.
    let mut p = Pruner::new(median(5, 1, 3), Direction::Minimize, "study");
    complete(&mut p, &[1.0, 1.0, 1.0, 1.0, 1.0], 12);
    assert!(!p.report(11, 0, 9.0)); // warmup
    assert!(p.report(11, 2, 9.0)); // first in [1,4)
    assert!(!p.report(11, 3, 9.0)); // still [1,4)
    assert!(p.report(11, 5, 9.0)); // first in [4,7)
    assert!(p.report(11, 9, 9.0)); // first in [7,10)
    assert!(p.report(11, 9, 1.0)); // a repeated step: ignored, same history, same answer
    assert!(p.report(11, 10, 9.0)); // first in [10,13)
}

#[test]
fn median_interval_check_on_repeated_step() {
    let mut p = Pruner::new(median(1, 0, 2), Direction::Minimize, "study");
    p.load(0, true, &[(0, 1.0), (1, 1.0), (2, 1.0)]);
    assert!(p.report(10, 0, 5.0));
    assert!(!p.report(10, 1, 5.0));
    // A duplicate report of step 1 is ignored and decided on the same history.
    assert!(!p.report(10, 1, 0.0));
    assert_eq!(p.running[&10].values[&1], 5.0);
    assert!(p.report(10, 2, 5.0));
}

#[test]
fn median_maximize_flips() {
    let mut p = Pruner::new(median(5, 0, 1), Direction::Maximize, "study");
    complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 2);
    assert!(p.report(10, 0, 2.5));
    assert!(!p.report(11, 0, 3.5));
    assert!(!p.report(12, 0, 3.0));
    // Best so far is the max: a later low value is not pruned.
    assert!(!p.report(11, 1, 0.0));
}

#[test]
fn median_prunes_nan() {
    let mut p = Pruner::new(median(5, 0, 1), Direction::Minimize, "study");
    complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 2);
    assert!(p.report(10, 0, f64::NAN));
    // NaN is skipped by nanmin: a trial with a good earlier value is judged by it.
    assert!(!p.report(11, 0, 1.0));
    assert!(!p.report(11, 1, f64::NAN));
    // But before startup or during warmup a NaN is not pruned (Optuna checks those first).
    let mut p = Pruner::new(median(5, 2, 1), Direction::Minimize, "study");
    assert!(!p.report(99, 5, f64::NAN));
    complete(&mut p, &[1.0, 2.0, 3.0, 4.0, 5.0], 3);
    assert!(!p.report(10, 1, f64::NAN));
}

#[test]
fn median_only_completed_curves_count() {
    let mut p = Pruner::new(median(1, 0, 1), Direction::Minimize, "study");
    p.load(0, true, &[(0, 10.0)]);
    // Pruned and failed trials with low values do not lower the median.
    p.load(1, false, &[(0, 0.0)]);
    assert!(!p.report(2, 0, 0.5));
    p.finish(2, false);
    assert!(!p.report(3, 0, 9.0));
    assert!(p.report(4, 0, 11.0));
    // Nor does a running trial's curve.
    assert_eq!(p.by_step_len(0), 1);
    // Reports after a finish are ignored.
    assert!(!p.report(1, 1, 1e9));
    p.finish(0, true);
    assert_eq!(p.n_completed(), 1);
}

#[test]
fn median_counts_completed_trials_without_reports() {
    let mut p = Pruner::new(median(2, 0, 1), Direction::Minimize, "study");
    p.load(0, true, &[(0, 1.0)]);
    assert!(!p.report(5, 0, 9.0));
    p.finish(1, true);
    assert!(p.report(6, 0, 9.0));
}

#[test]
fn numpy_percentile() {
    assert_eq!(nanpercentile_sorted(&[3.0], 50.0), 3.0);
    assert_eq!(nanpercentile_sorted(&[1.0, 2.0], 50.0), 1.5);
    assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0], 50.0), 2.0);
    assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 50.0), 3.0);
    assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 25.0), 1.75);
    assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 100.0), 8.0);
    assert_eq!(nanpercentile_sorted(&[1.0, 2.0, 4.0, 8.0], 0.0), 1.0);
    assert!(nanpercentile_sorted(&[], 50.0).is_nan());
}

#[test]
fn asha_rung_resources() {
    let p = Pruner::new(asha(1, 3, 0), Direction::Minimize, "study");
    let Algo::Asha(a) = &p.algo else { panic!() };
    let r: Vec<Option<i64>> = (0..5).map(|k| a.rung_resource(k)).collect();
    assert_eq!(r, [Some(1), Some(3), Some(9), Some(27), Some(81)]);
    let p = Pruner::new(asha(2, 4, 1), Direction::Minimize, "study");
    let Algo::Asha(a) = &p.algo else { panic!() };
    let r: Vec<Option<i64>> = (0..3).map(|k| a.rung_resource(k)).collect();
    assert_eq!(r, [Some(8), Some(32), Some(128)]);
    assert_eq!(a.rung_resource(100), None);
}

#[test]
fn asha_first_trial_promoted_at_every_rung() {
    let mut p = Pruner::new(asha(1, 3, 0), Direction::Minimize, "study");
    for s in 0..30 {
        assert!(!p.report(0, s, 100.0 + s as f64));
    }
    assert_eq!(p.running[&0].rung, 4); // rungs at 1, 3, 9, 27
    assert_eq!(p.rung_values(0), [101.0]);
    assert_eq!(p.rung_values(1), [103.0]);
    assert_eq!(p.rung_values(3), [127.0]);
}

/// Trials 0, 1, 2 reach rung 0 (step 1 for min_resource 1) with 1, 2, 3.
fn asha_with_1_2_3(direction: Direction) -> Pruner {
    let mut p = Pruner::new(asha(1, 3, 0), direction, "study");
    assert!(!p.report(0, 0, 9.0)); // below rung 0: no decision
    for (t, v) in [1.0, 2.0, 3.0].into_iter().enumerate() {
        p.report(t as i64, 1, v);
        p.finish(t as i64, false);
    }
    p
}

#[test]
fn asha_first_values_at_a_rung() {
    // With fewer than reduction_factor values, a trial must be the best one so far.
    let mut p = Pruner::new(asha(1, 3, 0), Direction::Minimize, "study");
    assert!(!p.report(0, 1, 1.0));
    assert!(p.report(1, 1, 2.0)); // [1, 2]: index 0
    assert!(p.report(2, 1, 3.0)); // [1, 2, 3]: index 3/3-1 = 0
    assert!(!p.report(3, 1, 0.5)); // [0.5, 1, 2, 3]: index 0
}

#[test]
fn asha_worse_than_top_third_pruned() {
    let mut p = asha_with_1_2_3(Direction::Minimize);
    // [1, 2, 2.5, 3]: promotable index 4/3-1 = 0, 2.5 > 1.
    assert!(p.report(3, 1, 2.5));
    assert_eq!(p.rung_values(0), [1.0, 2.0, 2.5, 3.0]); // recorded though pruned
}

#[test]
fn asha_best_promoted() {
    let mut p = asha_with_1_2_3(Direction::Minimize);
    // [0.5, 1, 2, 3]: 0.5 <= 0.5.
    assert!(!p.report(3, 1, 0.5));
    assert_eq!(p.running[&3].rung, 1);
}

#[test]
fn asha_promotable_index_grows_with_rung_size() {
    let mut p = asha_with_1_2_3(Direction::Minimize);
    p.report(3, 1, 2.5);
    p.report(4, 1, 0.5);
    // Six values [0.5, 1, 1.5, 2, 2.5, 3]: index 1, 1.5 > 1: pruned.
    assert!(p.report(5, 1, 1.5));
    // Seven values [0.5, 1, 1, 1.5, 2, 2.5, 3]: index 1, a tie at the cut-off is promoted.
    assert!(!p.report(6, 1, 1.0));
}

#[test]
fn asha_is_asynchronous() {
    let mut p = Pruner::new(asha(1, 2, 0), Direction::Minimize, "study");
    // Trial 0 reaches rung 0 and rung 1 alone: promoted both times without waiting.
    assert!(!p.report(0, 1, 5.0));
    assert!(!p.report(0, 2, 5.0));
    // Trial 1 is still below rung 0: it influences nothing.
    assert!(!p.report(1, 0, 0.0));
    assert_eq!(p.rung_values(0), [5.0]);
    // Trial 2 at rung 0 competes only with trial 0's record, not with trial 1's 0.0.
    assert!(!p.report(2, 1, 4.0));
    // A trial only recorded at rung 0 does not compete at rung 1.
    assert!(!p.report(0, 4, 5.0)); // rung 2 (step 4): trial 0 alone there.
    assert_eq!(p.rung_values(1), [5.0]);
    assert_eq!(p.rung_values(2), [5.0]);
    // A late report of an earlier step leaves the last step (1) as it was: no new rung.
    assert!(!p.report(2, 0, 100.0));
    assert!(!p.report(2, 1, 100.0)); // a repeated step: ignored
    assert_eq!(p.rung_values(0), [4.0, 5.0]);
}

#[test]
fn asha_report_crossing_several_rungs_uses_last_value() {
    let mut p = Pruner::new(asha(1, 3, 0), Direction::Minimize, "study");
    assert!(!p.report(0, 1, 1.0));
    assert!(!p.report(0, 3, 1.0));
    assert!(!p.report(0, 9, 1.0));
    // Trial 1 jumps straight to step 10: records 2.0 at rung 0 ([1,2], idx 0: pruned there).
    assert!(p.report(1, 10, 2.0));
    assert_eq!(p.rung_values(0), [1.0, 2.0]);
    assert_eq!(p.rung_values(1), [1.0]);
    // Trial 2 jumps with a better value: promoted through rungs 0, 1, 2.
    assert!(!p.report(2, 10, 0.5));
    assert_eq!(p.rung_values(2), [0.5, 1.0]);
}

#[test]
fn asha_nan_pruned_at_rung_only() {
    let mut p = Pruner::new(asha(2, 2, 0), Direction::Minimize, "study");
    assert!(!p.report(0, 1, f64::NAN));
    assert!(p.report(0, 2, f64::NAN));
    assert!(p.rung_values(0).is_empty());
}

#[test]
fn asha_maximize() {
    let mut p = asha_with_1_2_3(Direction::Maximize);
    // Under maximize 1, 2, 3 arrived worst first: 2 and 3 were each the best so far.
    // [1, 2, 2.5, 3]: the best one is needed, 2.5 < 3.
    assert!(p.report(3, 1, 2.5));
    assert!(!p.report(4, 1, 3.5));
    // Under maximize, 0.5 is the worst.
    let mut p = asha_with_1_2_3(Direction::Maximize);
    assert!(p.report(3, 1, 0.5));
    let mut p = Pruner::new(asha(1, 3, 0), Direction::Maximize, "study");
    assert!(!p.report(0, 1, 1.0));
    assert!(!p.report(1, 1, 2.0));
    assert!(p.report(2, 1, 1.5));
}

#[test]
fn asha_load_replays_history() {
    let mut a = Pruner::new(asha(1, 3, 0), Direction::Minimize, "study");
    a.load(0, true, &[(3, 1.0), (1, 1.0), (9, 1.0), (0, 7.0)]);
    a.load(1, false, &[(0, 5.0), (1, 2.0)]);
    a.load(2, false, &[(1, 3.0)]);
    assert_eq!(a.rung_values(0), [1.0, 2.0, 3.0]);
    assert_eq!(a.rung_values(1), [1.0]);
    assert_eq!(a.rung_values(2), [1.0]);
    assert!(a.running.is_empty());
    // Loaded trials are finished: reports for them are ignored.
    assert!(!a.report(1, 3, 0.0));
    assert!(a.report(3, 1, 2.5));
    assert!(!a.report(4, 1, 0.5));
}

impl Pruner {
    fn rung_values(&self, rung: usize) -> Vec<f64> {
        match &self.algo {
            Algo::Asha(a) => a.rungs.get(rung).cloned().unwrap_or_default(),
            _ => panic!("not asha"),
        }
    }

    fn by_step_len(&self, step: i64) -> usize {
        match &self.algo {
            Algo::Median(m) => m.by_step.get(&step).map_or(0, |s| s.count),
            _ => panic!("not median"),
        }
    }

    fn n_completed(&self) -> usize {
        match &self.algo {
            Algo::Median(m) => m.n_completed,
            _ => panic!("not median"),
        }
    }
}
