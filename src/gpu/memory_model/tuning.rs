//! The memory model's constants: how many trials it trusts, its margins, its ridge penalty,
//! when it leaves params out and pairs them; most say what they were measured against.
//!
//! Their own file, below both the model (`mod.rs`) and its fit (`fit`), which both read them:
//! the fit then imports nothing from the model it serves.

/// Measured trials before the regression is trusted; until then the prior (or the largest peak
/// measured, if larger) with [`PRIOR_MARGIN`].
pub const MIN_MEASURED: usize = 3;
/// The margin on the prior and on early estimates, as a factor.
pub const PRIOR_MARGIN: f64 = 1.15;
/// Measured peaks kept (oldest forgotten first).
pub const MAX_SAMPLES: usize = 2000;
/// The most recently measured trials whose leave-one-out errors calibrate the margin: the
/// current model's errors, not those of the models that came before it (a model of 5 trials
/// errs far more than one of 40, and its errors would keep the bound wide for no reason).
pub const MAX_ERRORS: usize = 100;
/// The quantile of the (distance-scaled) leave-one-out errors the margin covers. With the
/// widening while errors are few and the local errors, it keeps under-estimates below the aim of
/// 1 admission in 100 (the unit tests' width × depth workload measures it), where p99 of at most
/// 100 errors would be their single largest, which keeps the bound wide.
pub const QUANTILE: f64 = 0.97;
/// Extra log-margin while errors are few: `EARLY / sqrt(n)` with n leave-one-out errors.
pub const EARLY: f64 = 0.3;
/// The smallest log-margin (measurement noise between runs of the same params).
pub const MIN_MARGIN: f64 = 0.02;
/// How an error scales with how far a trial is from every measured one (in predicted
/// log-peak): errors are calibrated as `error / (SPREAD + distance)`, so that a trial among
/// measured ones gets a narrow margin and one beyond them (extrapolated) a wide one.
pub const SPREAD: f64 = 0.1;
/// The least log-margin for what the measured trials leave unexplored: `UNEXPLORED × √u / n`,
/// `u` the squared length (in feature units) of the part of a trial's features that the `n`
/// measured ones never varied (`Fit::unexplored`). Leave-one-out errors speak only for trials
/// like the measured ones: with 3 to 7 measured, all shallow, a deep trial was predicted among
/// them and peaked at up to 4 times its bound (88 of 2000 such estimates low on the unit tests'
/// continuous workload over 400 seeds; 17 with this margin, 6 of 11200 from 12 measured on
/// either way). Fading as 1/n, it costs little once a dozen trials are measured.
pub const UNEXPLORED: f64 = 7.5;
/// The log-margin added for each unit of log-distance by which a prediction lies beyond the
/// largest peak measured: `BEYOND × ln(predicted / largest)`. Extrapolated past every measured
/// peak, a fit errs by its slopes' error times the distance, which none of its leave-one-out
/// errors shows (each of those trials was predicted among the others). Every out-of-memory
/// failure read in the two-daemon packing bench's kept runs was of this kind: its largest
/// config (14.0 GiB, width × depth 6672) predicted at 8.5 GiB after 13 trials whose largest
/// peak was 4.1 GiB and largest width × depth 1576. The first of each new size pays for it;
/// trials among the measured ones do not.
///
/// Only while the fit is linear in the params: once it has their products ([`PAIR_FROM`]),
/// it curves as a network's memory does, and that same config is predicted at 12.2 GiB, its
/// errors' margin making it 16.9 GiB. There the widening bought little safety (104 of 12000
/// estimates below the peak on the 7-param unit workload against 110 without it) at a cost
/// the packing bench showed: every large trial asked for most of the card until one of its
/// size was measured, so the line passed all of them until nothing else was left, and they
/// ran one at a time at the end of the study.
pub const BEYOND: f64 = 0.5;
/// Measured trials whose residuals correct a prediction locally.
pub const NEIGHBOURS: usize = 5;
/// Ridge penalty on the coefficients (features are in [0, 1]): a fixed part that matters while
/// trials are few (a fit on a handful of trials must not swing), and a part per trial.
pub const RIDGE_FIXED: f64 = 0.1;
pub const RIDGE: f64 = 1e-3;
/// The share of the smallest measured peak every trial is taken to hold (its CUDA context, the
/// framework's own buffers): the regression is of the log of what a trial holds above it, which
/// grows as a product of its sizes where the whole peak does not (a context plus a product).
/// Half: on the unit tests' width × depth workload the bound is then closer to the peak than
/// with none, and no less often above it; past about 0.7 the few smallest trials dominate.
pub const BASE_SHARE: f64 = 0.5;
/// Measured trials per param before the fit leaves out params that do not earn their place
/// (`fit::select`). Selecting from 3 trials on, 5 of 200 estimates with 3 to 7 trials measured fell
/// below the peak on the unit tests' width × depth workload (a param that drives memory dropped
/// for want of trials that show it; none without selection), and from 8 trials on, 16 of 240
/// with 8 to 11 measured on their 7-param one (7 without); from 4 per param, no more than
/// without selection on either.
pub const MIN_SELECT: usize = 4;
/// The least change in log-peak across a param's own range for the admission line to call it
/// a driver of memory; a param whose coefficients stay below it may be left out of the fit
/// (`fit::select`), one above it never is. Dropping any param that predicts the trials no worse
/// without it tightened the bound on the unit tests' 7-param workload (1.41 → 1.37 times the
/// peak at the median from 20 trials on, 300 seeds) only as far as it let more estimates fall
/// below the peak (82 → 97 of 12000); with this gate, 88 at 1.41.
pub const DRIVES: f64 = 0.05;
/// The most features of the params that drive memory that pair with each other in the fit
/// (`fit::pair_drivers`): a fit's cost grows as the square of its features, and pairs as the square
/// of these (8 make 36 pairs at most).
pub const MAX_PAIRED: usize = 8;
/// Measured trials per param before the fit tries products (`fit::pair_drivers`). From 3 (9 trials
/// for 3 params), on the unit tests' width × depth workload the bound with 8 to 11 measured went
/// from 1.35 to 1.27 times the peak at the median, with 1 of 1600 estimates below it where 3
/// had been (400 seeds); from 4 it stayed at 1.35. From 2, the 7-param workload's estimates with
/// 8 to 19 measured fell below the peak more often (104 of 3600, 94 without products).
pub const PAIR_FROM: usize = 3;
/// Two trials whose predicted log-peaks differ by less than this, param by param, count as the
/// same config: the larger of their measured peaks bounds the estimate.
pub const SAME_CONFIG: f64 = 0.01;
/// Measured trials of the same config whose largest peak is trusted as the bound on its own.
pub const SAME_CONFIG_TRUSTED: usize = 3;
/// An out-of-memory failure at `reached` bytes raises estimates within this distance (in
/// predicted log-peak) to `reached × OOM_GROWTH`.
pub const OOM_RADIUS: f64 = 0.1;
pub const OOM_GROWTH: f64 = 1.25;

/// Under caps ([`super::Aim::Peak`]): the quantile of the (distance-scaled) leave-one-out errors
/// the margin covers. The estimate aims at the peak, not at a bound: a trial that outgrows it
/// fails alone at its cap and is re-run, at the cost of the seconds until the hit. p80: on the
/// unit tests' width × depth workload (40 seeds), from 12 trials measured on, 134 of 1120
/// estimates fell below the peak (none with caps off), at 1.02 times the peak at the median
/// where the p97 bound is 1.09 (`estimates_under_caps_aim_at_the_peak`; `docs/decisions.md`,
/// "Bold estimates under caps").
pub const BOLD_QUANTILE: f64 = 0.8;
/// Under caps, the share of `trial_memory` a study's first trials start at while nothing is
/// measured: most trials are smaller than the largest one a user sizes `trial_memory` for, and
/// one that is not costs a few seconds per re-run ([`CAP_GROWTH`]), where a first trial admitted
/// at the guess holds a quarter of the card for its whole run.
pub const BOLD_PRIOR_SHARE: f64 = 0.25;
/// Under caps, a re-run after a cap hit is expected at least at this many times the bytes the
/// failed attempt was admitted with (beside its level × [`OOM_GROWTH`]): a trial that allocates
/// in small steps hits its cap just past it, and would otherwise need a re-run per 25%. 1.5
/// brings `trial_memory / 4` to `trial_memory` in 4 re-runs (2 would in 2), while a re-run
/// counts at its cap for its whole run (`gpu::admission`): what it overshoots by is held for
/// minutes, what an extra re-run costs is seconds.
pub const CAP_GROWTH: f64 = 1.5;
