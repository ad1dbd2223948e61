//! The study's domain: what a trial is, the values it takes, how it ended and how the budget
//! counts it, each state and kind as an enum with one name and its database spelling, and the
//! names of the attributes that carry them on Optuna's tables (`attrs`); what a person asked
//! of the whole study and what a daemon does about it (`control`); the rules of a trial added
//! with chosen params (`enqueue`).
//!
//! Pure types and rules, no I/O, and nothing else of sweepd's imported but `units` (sizes and
//! durations in `reason`'s phrases): every other module may use them (config, store, samplers,
//! the supervisor), so the arrows between those never have to point back. `reason`: why a trial
//! waits or what it does, the phrase `status` shows; `budget`: the time, GPU-hours and stall
//! limits beside `n_trials`, the one decision of which ends the study, and its words.

// First: its `spelled!` enums macro is used by the files below.
#[macro_use]
mod trial;
pub mod attrs;
pub mod budget;
pub mod control;
mod decimal;
pub mod enqueue;
pub mod pareto;
pub mod pyjson;
pub mod reason;
pub mod rules;
pub mod space;
mod tally;

pub use control::{ControlState, Steer, StudyControl};
pub use space::{Distribution, Dists, ParamSpec, ParamValue, Params, SearchSpace, MAX_GRID_POINTS};
pub use tally::Tally;
pub use trial::{
    checkpoint_key, constraint_values, Attempts, Claimed, ConstraintAttrs, Counts, DaemonCommand,
    DaemonState, Direction, Failure, FailureKind, Finish, RetryOf, TrialRecord, TrialState,
    UnknownName, WorkerState,
};
