//! Samplers: where a new trial's parameter values come from.
//!
//! sweepd writes studies that Optuna can read, so the samplers mirror Optuna's `RandomSampler`
//! and `GridSampler`: a study started by sweepd and continued in Python (or the other way round)
//! draws from the same distributions and, for the grid, covers the same points.
//!
//! Two properties matter more here than in Optuna because sweepd is a long-running daemon that
//! may be restarted mid-study:
//! - a seeded random proposal depends only on (seed, trial number), never on how many proposals
//!   this process made before, so a restart does not replay the proposals already made and a
//!   rerun of the study reproduces its params whatever order the workers were dispatched in;
//! - the grid learns which points the study already holds through [`Sampler::observe`], so after
//!   a restart (or a manual `enqueue_trial`) it does not propose a point twice.
//!
//! Each sampler has its own file: [`random`] (Optuna's `RandomSampler`), [`grid`] (its
//! `GridSampler`) and [`tpe`] (its `TPESampler`); this one holds what they share: the
//! [`Sampler`] trait the supervisor drives them through, and [`build`].

use crate::config::{SamplerConfig, SamplerKind};
use crate::study::{Direction, Params, SearchSpace, TrialRecord};

pub mod grid;
pub mod nsga2;
pub mod random;
#[cfg(test)]
mod testkit;
pub mod tpe;

pub use grid::GridSampler;
pub use random::RandomSampler;

/// What a sampler is told about the study, and what it proposes.
pub trait Sampler: Send {
    /// Proposes values for every param of `space` that `fixed` does not already hold, and returns
    /// the full Params (fixed ones included, unchanged). `None` = nothing left to propose
    /// (grid exhausted). `seed_key` is the trial number the proposal is for: a seeded sampler must
    /// derive its randomness for this proposal from (seed, seed_key) only, so a restarted daemon
    /// does not repeat the proposals it already made and results are reproducible regardless of
    /// dispatch order.
    fn sample(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Params>;
    /// A trial with these params exists and has not finished (RUNNING or WAITING: called on
    /// start for such trials found in the database, and for every trial claimed or created
    /// later). Grid uses it to skip points already taken; TPE's constant liar uses it.
    /// Params may be partial (a trial enqueued with some params).
    fn observe(&mut self, number: i64, params: &Params);
    /// A trial finished (called on start for every finished trial in the database, and as
    /// each trial ends). The trial may or may not have been `observe`d before.
    fn tell(&mut self, record: &TrialRecord);
}

/// Builds the sampler the config asks for, after checking that every distribution can be
/// sampled, so that a bad config fails at startup rather than as a panic mid-sweep. `seed` is
/// the one the caller resolved (`[sampler] seed`, else `[study] seed`); `settings.seed` is not
/// read.
pub fn build(
    kind: SamplerKind,
    space: &SearchSpace,
    seed: Option<u64>,
    directions: &[Direction],
    settings: &SamplerConfig,
) -> Result<Box<dyn Sampler>, String> {
    validate(space)?;
    let settings = SamplerConfig {
        seed,
        ..settings.clone()
    };
    Ok(match kind {
        SamplerKind::Random => Box::new(RandomSampler::new(seed)),
        SamplerKind::Grid => Box::new(GridSampler::new(space, seed)?),
        SamplerKind::Tpe => Box::new(tpe::TpeSampler::with_directions(
            space, directions, settings,
        )),
        SamplerKind::Nsga2 => Box::new(nsga2::Nsga2Sampler::new(directions, settings)),
    })
}

/// Rejects distributions that would make a sampler panic or loop (empty ranges, non-positive
/// steps, log scale over non-positive values). The config loader is expected to catch these
/// too; checking again here keeps the samplers total whatever built the space.
fn validate(space: &SearchSpace) -> Result<(), String> {
    for p in &space.params {
        p.dist
            .check()
            .map_err(|why| format!("param `{}`: {why}", p.name))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::study::space::test_util::{cat, float, int, spec};

    #[test]
    fn build_checks_the_space() {
        let bad = SearchSpace {
            params: vec![spec("i", int(0, 10, 0, false))],
        };
        // Finite, so that every kind, the grid included, can sample it.
        let good = SearchSpace {
            params: vec![
                spec("x", float(0.0, 0.3, Some(0.1), false)),
                spec("n", int(2, 6, 2, false)),
                spec("opt", cat(2)),
            ],
        };
        for kind in [
            SamplerKind::Random,
            SamplerKind::Grid,
            SamplerKind::Tpe,
            SamplerKind::Nsga2,
        ] {
            let make = |space| {
                build(
                    kind,
                    space,
                    Some(1),
                    &[Direction::Minimize],
                    &Default::default(),
                )
            };
            assert!(make(&bad).is_err(), "{kind:?}");
            let mut s = make(&good).unwrap();
            assert!(s.sample(&good, &Params::new(), 0).is_some(), "{kind:?}");
        }
    }
}
