//! Samplers: where a new trial's parameter values come from.
//!
//! sweepd writes studies that Optuna can read, so the samplers mirror Optuna's `RandomSampler`
//! and `GridSampler`: a study started by sweepd and continued in Python (or the other way round)
//! draws from the same distributions and, for the grid, covers the same points.
//!
//! A study's search space is the static `[params]` (optional) plus whatever its objectives
//! suggest as they run (define-by-run, protocol 2), so a sampler answers twice, as Optuna's do:
//! [`Sampler::propose`] when a trial starts (the `[params]` space, and Optuna's *relative*
//! sampling over the params the study's trials share), and [`Sampler::suggest`] for each param
//! the objective then asks for that the start did not settle (Optuna's `sample_independent`).
//!
//! Two properties matter more here than in Optuna because sweepd is a long-running daemon that
//! may be restarted mid-study:
//! - a seeded random draw depends only on (seed, trial number, param name), never on how many
//!   proposals this process made before nor on the order an objective suggests its params in,
//!   so a restart does not replay the proposals already made and a rerun of the study
//!   reproduces its params whatever order the workers were dispatched in;
//! - the grid learns which points the study already holds through [`Sampler::observe`], so after
//!   a restart (or a manual `enqueue_trial`) it does not propose a point twice.
//!
//! Each sampler has its own file: [`random`] (Optuna's `RandomSampler`), [`grid`] (its
//! `GridSampler`, which searches the static `[params]` space only), [`tpe`] (its
//! `TPESampler`), [`nsga2`] (its `NSGAIISampler`) and [`gp`] (its `GPSampler`); this one holds what they share: the [`Sampler`] trait the supervisor drives
//! them through, [`build`], and the keyed random streams.

use crate::config::{SamplerConfig, SamplerKind};
use crate::study::{Direction, Distribution, ParamValue, Params, SearchSpace, TrialRecord};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;

pub mod gp;
pub mod grid;
pub mod nsga2;
pub mod random;
#[cfg(test)]
mod testkit;
pub mod tpe;

pub use grid::GridSampler;
pub use random::RandomSampler;

/// Values drawn jointly for a trial about to start, by name, each with the distribution it was
/// drawn from (Optuna's `relative_params`, kept in memory). The objective gets one when it
/// suggests the name with a compatible distribution that contains it; the rest are never
/// written.
pub type Relative = BTreeMap<String, (Distribution, ParamValue)>;

/// What a sampler proposes for a trial about to start.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Proposal {
    /// Every param of the static space (the fixed ones unchanged): written when the trial
    /// starts, and sent to the worker.
    pub params: Params,
    /// Relative values for names the objective may suggest (none of `params`).
    pub relative: Relative,
}

/// What a sampler is told about the study, and what it proposes.
pub trait Sampler: Send {
    /// Proposes values for every param of `space` (the static `[params]`) that `fixed` does not
    /// already hold, and relative values for the params the objective may suggest. `None` =
    /// nothing left to propose (grid exhausted). `seed_key` is the trial number the proposal is
    /// for: a seeded sampler must derive its randomness for this proposal from (seed,
    /// seed_key) only, so a restarted daemon does not repeat the proposals it already made and
    /// results are reproducible regardless of dispatch order.
    fn propose(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Proposal>;
    /// A value of `dist` for param `name`, which the objective of trial `seed_key` asked for
    /// and its start did not settle (Optuna's `sample_independent`). Seeded: a function of
    /// (seed, seed_key, name) and what the sampler was told. `Err` says why this sampler cannot
    /// (the grid searches `[params]` only).
    fn suggest(
        &mut self,
        name: &str,
        dist: &Distribution,
        seed_key: u64,
    ) -> Result<ParamValue, String>;
    /// A trial with these params exists and has not finished (RUNNING or WAITING: called on
    /// start for such trials found in the database, and for every trial claimed or created
    /// later, again as its objective suggests more). Grid uses it to skip points already
    /// taken; TPE's constant liar uses it. Params may be partial.
    fn observe(&mut self, number: i64, params: &Params);
    /// A trial finished (called on start for every finished trial in the database, and as
    /// each trial ends). The trial may or may not have been `observe`d before.
    fn tell(&mut self, record: &TrialRecord);

    /// [`Sampler::propose`]'s static params alone.
    fn sample(&mut self, space: &SearchSpace, fixed: &Params, seed_key: u64) -> Option<Params> {
        self.propose(space, fixed, seed_key).map(|p| p.params)
    }
}

/// The stream of a random sampler's draw of one param.
pub(crate) const RANDOM_DOMAIN: u8 = 0;
/// The stream of a trial's relative (joint) proposal.
pub(crate) const RELATIVE_DOMAIN: u8 = 1;

/// FNV-1a: a hash of a param name that is the same on every platform and Rust version (std's
/// hashers promise neither), so that seeded studies reproduce everywhere.
fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The random stream of (seed, trial, name, what it is for): one per param draw, so that a
/// draw does not depend on which other params were drawn before it or in what order.
pub(crate) fn keyed_rng(seed: u64, seed_key: u64, name: &str, domain: u8) -> ChaCha8Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&fnv1a(name).to_le_bytes());
    key[16] = domain;
    let mut rng = ChaCha8Rng::from_seed(key);
    rng.set_stream(seed_key);
    rng
}

/// Builds the sampler the config asks for, after checking that every distribution can be
/// sampled, so that a bad config fails at startup rather than as a panic mid-sweep. `seed` is
/// the one the caller resolved (`[sampler] seed`, else `[study] seed`); `settings.seed` is not
/// read. The grid needs a static space: an empty `space` is refused for it.
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
        SamplerKind::Tpe => Box::new(tpe::TpeSampler::with_directions(directions, settings)),
        SamplerKind::Nsga2 => Box::new(nsga2::Nsga2Sampler::new(directions, settings)),
        SamplerKind::Gp => match directions {
            [direction] => Box::new(gp::GpSampler::new(*direction, settings)),
            _ => return Err(crate::config::gp_objectives(directions.len())),
        },
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
            SamplerKind::Gp,
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
