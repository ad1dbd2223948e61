//! Optuna 5.0's `HyperbandPruner` (`optuna/pruners/_hyperband.py`): several successive halvings
//! ("brackets") side by side, bracket `k` starting its rungs at `min_resource *
//! reduction_factor^k`, so that bracket 0 prunes hardest and the last bracket lets its trials run
//! longest before it judges them.
//!
//! - **When it starts.** Optuna makes its brackets at the first `should_prune` that can: at
//!   once with a given `max_resource`, else ("auto") once a COMPLETE trial with reports exists,
//!   `max_resource` then being the largest last step of the COMPLETE trials plus one, fixed from
//!   then on. Until then nothing is pruned and no rung is recorded.
//! - **How many brackets.** `floor(log(max_resource / min_resource) / log(reduction_factor)) +
//!   1`, in floating point as Python computes it (so 243 / 1 with factor 3 gives 5 brackets,
//!   not 6); none (never pruning) where `max_resource < min_resource`.
//! - **Which bracket a trial is in.** Bracket `k`'s budget is
//!   `ceil(n * reduction_factor^s / (s + 1))` with `s = n - 1 - k`; a trial goes to the bracket
//!   where `crc32("{study_name}_{number}") % (sum of budgets)` falls, the budgets laid end to
//!   end. The study's name and the trial's number alone decide it, so every process (and a
//!   restarted daemon) agrees.
//! - **What a bracket sees.** Its successive halving (`min_early_stopping_rate = k`, the
//!   pruner's `bootstrap_count`) competes the trials of its own bracket only (Optuna's
//!   `_BracketStudy.get_trials`).
//!
//! The sampler is not affected: Optuna 5.0 hands its sampler the same `_BracketStudy`, but that
//! filters `get_trials` only, and every sampler reads `_get_trials` (or the storage), so
//! TPE sees every trial of the study (checked in the golden data).

use super::curve::Running;
use super::sha::Sha;
use crate::config::MaxResource;
use crate::study::Direction;

/// The pruner's settings, and its brackets once made.
#[derive(Debug, Clone)]
pub(super) struct Hyperband {
    min_resource: i64,
    max_resource: MaxResource,
    reduction_factor: u32,
    bootstrap_count: usize,
    study_name: String,
    /// The largest last step of the COMPLETE trials told so far (for `max_resource = "auto"`).
    completed_last_step: Option<i64>,
    /// `None` until made (Optuna's `_try_initialization`); then fixed.
    pub(super) brackets: Option<Brackets>,
}

/// What Optuna's `_try_initialization` makes.
#[derive(Debug, Clone)]
pub(super) struct Brackets {
    pub(super) max_resource: i64,
    /// Each bracket's trial allocation budget.
    pub(super) budgets: Vec<u64>,
    /// Each bracket's successive halving: empty where there is no bracket.
    pub(super) sha: Vec<Sha>,
}

impl Hyperband {
    pub(super) fn new(
        min_resource: i64,
        max_resource: MaxResource,
        reduction_factor: u32,
        bootstrap_count: usize,
        study_name: &str,
    ) -> Hyperband {
        Hyperband {
            min_resource: min_resource.max(1),
            max_resource,
            reduction_factor: reduction_factor.max(2),
            bootstrap_count,
            study_name: study_name.to_owned(),
            completed_last_step: None,
            brackets: None,
        }
    }

    /// `HyperbandPruner.prune`: the brackets made if they can be, then the trial's bracket's
    /// successive halving decides.
    pub(super) fn prune(&mut self, number: i64, trial: &mut Running, direction: Direction) -> bool {
        if self.brackets.is_none() {
            self.brackets = self.try_initialization();
        }
        let Some(b) = &mut self.brackets else {
            return false;
        };
        match bracket_of(&self.study_name, number, &b.budgets) {
            Some(k) => b.sha[k].prune(trial, direction),
            None => false,
        }
    }

    /// A trial completed with this curve: its last step may settle `max_resource = "auto"`.
    pub(super) fn completed(&mut self, trial: Option<&Running>) {
        if let Some((step, _)) = trial.and_then(Running::last) {
            self.completed_last_step = Some(self.completed_last_step.map_or(step, |s| s.max(step)));
        }
    }

    /// The bracket of trial `number`, once the brackets are made (before, Optuna's
    /// `_get_bracket_id` answers 0 for every trial).
    pub(super) fn bracket(&self, number: i64) -> Option<usize> {
        let b = self.brackets.as_ref()?;
        bracket_of(&self.study_name, number, &b.budgets)
    }

    fn try_initialization(&self) -> Option<Brackets> {
        let max_resource = match self.max_resource {
            MaxResource::Steps(m) => m,
            MaxResource::Auto => self.completed_last_step?.saturating_add(1),
        };
        let n = n_brackets(self.min_resource, max_resource, self.reduction_factor);
        let budgets = (0..n)
            .map(|k| bracket_budget(n, k, self.reduction_factor))
            .collect();
        let sha = (0..n)
            .map(|k| {
                // n <= 64: a bracket's index fits its rate.
                let rate = u32::try_from(k).unwrap_or(u32::MAX);
                Sha::new(
                    self.min_resource,
                    self.reduction_factor,
                    rate,
                    self.bootstrap_count,
                )
            })
            .collect();
        Some(Brackets {
            max_resource,
            budgets,
            sha,
        })
    }
}

/// The number of brackets: `math.floor(math.log(max_resource / min_resource,
/// reduction_factor)) + 1` as Python computes it (the division of two integers, then
/// `log(x) / log(base)` with the C library's `log`), 0 where that is not positive. Exact as
/// Python's for the ratios a config allows (`max_resource` at most 2^31: both integers and
/// their quotient's rounding are the same in `f64`).
pub(super) fn n_brackets(min_resource: i64, max_resource: i64, reduction_factor: u32) -> usize {
    let ratio = max_resource as f64 / min_resource as f64;
    let log = ratio.ln() / f64::from(reduction_factor).ln();
    let n = log.floor() + 1.0;
    if n.is_nan() || n < 1.0 {
        0
    } else {
        // The ratio is below 2^63 and the factor at least 2: at most 64.
        n as usize
    }
}

/// `_calculate_trial_allocation_budget`: `math.ceil(n * reduction_factor**s / (s + 1))` with
/// `s = n - 1 - bracket`. Python divides the exact integers in floating point; the integer
/// ceiling here is the same while the quotient is below 2^46 (it is below 2^40 for any
/// `max_resource` a config allows), and saturates rather than overflow beyond.
pub(super) fn bracket_budget(n_brackets: usize, bracket: usize, reduction_factor: u32) -> u64 {
    let s = n_brackets.saturating_sub(1).saturating_sub(bracket);
    let power = u32::try_from(s)
        .ok()
        .and_then(|s| u128::from(reduction_factor).checked_pow(s));
    let numerator = power.and_then(|p| p.checked_mul(n_brackets as u128));
    let budget = numerator.map_or(u128::MAX, |x| x.div_ceil(s as u128 + 1));
    u64::try_from(budget).unwrap_or(u64::MAX)
}

/// `_get_bracket_id`: where `crc32("{study_name}_{number}") % total` falls among the budgets
/// laid end to end. `None` where there is no bracket.
pub(super) fn bracket_of(study_name: &str, number: i64, budgets: &[u64]) -> Option<usize> {
    let total: u128 = budgets.iter().map(|b| u128::from(*b)).sum();
    if total == 0 {
        return None;
    }
    let mut n = u128::from(crc32(format!("{study_name}_{number}").as_bytes())) % total;
    for (k, budget) in budgets.iter().enumerate() {
        let budget = u128::from(*budget);
        if n < budget {
            return Some(k);
        }
        n -= budget;
    }
    None
}

/// CRC-32 as zlib and Python's `binascii.crc32` compute it (reflected polynomial 0xEDB88320,
/// initial value and final XOR 0xFFFFFFFF).
pub(super) fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for byte in bytes {
        crc ^= u32::from(*byte);
        for _ in 0..8 {
            let mask = (crc & 1).wrapping_neg();
            crc = (crc >> 1) ^ (0xEDB8_8320 & mask);
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::super::{Pruner, PrunerKind};
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(b"", 0)]
    #[case(b"a", 0xE8B7_BE43)]
    #[case(b"123456789", 0xCBF4_3926)]
    #[case(b"hb_0", 0x8F7F_6E89)]
    fn crc32_of(#[case] bytes: &[u8], #[case] want: u32) {
        assert_eq!(crc32(bytes), want);
    }

    // Python's floor(log(max / min, factor)) + 1, rounding included: 243 and 1000 fall just
    // below their exact logarithms, 125 just above.
    #[rstest]
    #[case(1, 27, 3, 4)]
    #[case(1, 81, 3, 5)]
    #[case(1, 243, 3, 5)]
    #[case(1, 1000, 10, 3)]
    #[case(1, 125, 5, 4)]
    #[case(1, 80, 3, 4)]
    #[case(3, 300, 4, 4)]
    #[case(1, 1, 3, 1)]
    #[case(5, 2, 3, 0)]
    #[case(1, 2, u32::MAX, 1)]
    #[case(1, 1 << 31, 2, 32)]
    fn brackets_of(#[case] min: i64, #[case] max: i64, #[case] rf: u32, #[case] want: usize) {
        assert_eq!(n_brackets(min, max, rf), want);
    }

    #[rstest]
    #[case(4, 3, &[27, 12, 6, 4])]
    #[case(5, 3, &[81, 34, 15, 8, 5])]
    #[case(6, 2, &[32, 20, 12, 8, 6, 6])]
    #[case(1, 3, &[1])]
    fn budgets_of(#[case] n: usize, #[case] rf: u32, #[case] want: &[u64]) {
        let got: Vec<u64> = (0..n).map(|k| bracket_budget(n, k, rf)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_budget_past_u64_saturates() {
        assert_eq!(bracket_budget(64, 0, u32::MAX), u64::MAX);
        assert_eq!(bracket_of("s", 0, &[u64::MAX, u64::MAX]), Some(0));
        assert_eq!(bracket_of("s", 0, &[]), None);
    }

    fn hyperband(min: i64, max: MaxResource, rf: u32, bootstrap: usize) -> Pruner {
        let kind = PrunerKind::Hyperband {
            min_resource: min,
            max_resource: max,
            reduction_factor: rf,
            bootstrap_count: bootstrap,
        };
        Pruner::new(kind, Direction::Minimize, "hb")
    }

    /// The first trial numbers of study "hb" in bracket `k` of budgets [27, 12, 6, 4] (min 1,
    /// max 27, factor 3).
    fn in_bracket(k: usize, n: usize) -> Vec<i64> {
        (0..)
            .filter(|t| bracket_of("hb", *t, &[27, 12, 6, 4]) == Some(k))
            .take(n)
            .collect()
    }

    #[test]
    fn study_hb_brackets() {
        // As Optuna assigns them (the golden data's first case).
        let got: Vec<Option<usize>> = (0..12)
            .map(|t| bracket_of("hb", t, &[27, 12, 6, 4]))
            .collect();
        let want = [0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 3, 0];
        assert_eq!(got, want.map(Some));
        assert_eq!(in_bracket(2, 1), [13]);
    }

    #[test]
    fn auto_waits_for_a_completed_trial_with_reports() {
        let mut p = hyperband(1, MaxResource::Auto, 3, 0);
        for step in 0..30 {
            assert!(!p.report(0, step, 1e9 + step as f64));
            assert!(!p.report(3, step, f64::NAN));
        }
        // Neither a pruned or failed curve, nor a completed trial without reports, settles it.
        p.finish(3, false);
        p.finish(5, true);
        assert!(!p.report(8, 5, 1e9));
        assert_eq!(p.hyperband_brackets(), None);
        assert_eq!(p.bracket(0), None);
        // Two trials complete before the next report: the larger last step, plus one.
        for (t, last) in [(6, 26), (11, 40)] {
            assert!(!p.report(t, 0, 1.0));
            assert!(!p.report(t, last, 1.0));
        }
        p.finish(6, true);
        p.finish(11, true);
        assert!(!p.report(8, 6, 1e9));
        assert_eq!(p.hyperband_brackets(), Some((41, 4)));
        assert_eq!(p.bracket(0), Some(0));
    }

    #[test]
    fn reports_before_the_brackets_are_judged_at_the_next_report_after() {
        let mut p = hyperband(1, MaxResource::Auto, 3, 0);
        let b0 = in_bracket(0, 3);
        // Trial b0[0] runs to step 8 before any trial completed: nothing recorded, no prune.
        for step in 0..9 {
            assert!(!p.report(b0[0], step, 5.0));
        }
        p.load(b0[1], true, &[(0, 1.0), (26, 1.0)]);
        // Its next report records 5.0 at every rung its step passed (1, 3, 9): alone at each.
        assert!(!p.report(b0[0], 9, 5.0));
        // b0[2] is worse at rung 0 (step 1): [5, 6], only the best promoted.
        assert!(!p.report(b0[2], 0, 6.0));
        assert!(p.report(b0[2], 1, 6.0));
    }

    #[test]
    fn a_trial_is_judged_at_its_own_brackets_rungs_against_its_bracket_only() {
        let mut p = hyperband(1, MaxResource::Steps(27), 3, 0);
        let (b0, b1, b3) = (in_bracket(0, 2), in_bracket(1, 2), in_bracket(3, 1));
        assert!(!p.report(b0[0], 1, 1.0));
        // Bracket 0's first rung is step 1: worse than the one value there, pruned.
        assert!(p.report(b0[1], 1, 2.0));
        // Bracket 1's is step 3, bracket 0's 1.0 not among its competitors.
        assert!(!p.report(b1[0], 1, 2.0));
        assert!(!p.report(b1[0], 3, 2.0));
        assert!(p.report(b1[1], 3, 2.5));
        // Bracket 3 (the last: min_early_stopping_rate 3) judges at step 27, which a trial of 27
        // steps (0..=26) never reports: it runs to the end.
        for step in 0..27 {
            assert!(!p.report(b3[0], step, 1e9));
        }
    }

    #[test]
    fn bootstrap_count_prunes_until_a_rung_holds_more_values() {
        let mut p = hyperband(1, MaxResource::Steps(27), 3, 2);
        let b0 = in_bracket(0, 4);
        // Competing values (its own included) must outnumber bootstrap_count.
        assert!(p.report(b0[0], 1, 1.0));
        assert!(p.report(b0[1], 1, 1.0));
        assert!(!p.report(b0[2], 1, 0.5));
        assert!(p.report(b0[3], 1, 2.0));
    }

    #[test]
    fn auto_below_min_resource_never_prunes() {
        let mut p = hyperband(10, MaxResource::Auto, 3, 0);
        p.load(0, true, &[(0, 1.0), (4, 1.0)]);
        for step in 0..100 {
            assert!(!p.report(1, step, f64::NAN));
        }
        assert_eq!(p.hyperband_brackets(), Some((5, 0)));
        assert_eq!(p.bracket(1), None);
    }

    #[test]
    fn a_restarted_pruner_loaded_with_the_history_answers_as_the_live_one() {
        // Trials one at a time, as a restart replays them (by number), with curves crossing
        // rungs step by step.
        let curve = |t: i64, s: i64| ((t * 7919) % 13) as f64 / 13.0 + 1.0 / (s + 1) as f64;
        let mut live = hyperband(1, MaxResource::Auto, 3, 0);
        let mut history = Vec::new();
        for t in 0..40 {
            let mut reported = Vec::new();
            for s in 0..27 {
                reported.push((s, curve(t, s)));
                if live.report(t, s, curve(t, s)) {
                    break;
                }
            }
            let completed = reported.len() == 27;
            live.finish(t, completed);
            history.push((t, completed, reported));
        }
        let mut restarted = hyperband(1, MaxResource::Auto, 3, 0);
        for (t, completed, reported) in &history {
            restarted.load(*t, *completed, reported);
        }
        assert_eq!(restarted.hyperband_brackets(), live.hyperband_brackets());
        let mut pruned = 0;
        for t in 40..80 {
            for s in 0..27 {
                let (a, b) = (
                    live.report(t, s, curve(t, s)),
                    restarted.report(t, s, curve(t, s)),
                );
                assert_eq!(a, b, "trial {t} step {s}");
                if a {
                    pruned += 1;
                    break;
                }
            }
        }
        assert!(pruned > 10, "{pruned}");
    }
}
