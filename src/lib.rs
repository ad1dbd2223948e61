//! sweepd: runs hyperparameter sweeps of trial worker processes unattended.
//!
//! Data flow: [`config`] turns `supervisor.toml` into a validated `Config`; [`supervisor`]
//! opens the [`store`] (Optuna's schema in SQLite), then runs `max_par` slots, each asking the
//! study for a trial (WAITING ones first, else a [`sampler`] proposal over the [`space`]) and
//! running it on a worker [`process`]. [`cli`] renders what the store holds.
//! See `docs/architecture.md`.

pub mod classify;
pub mod cli;
pub mod clock;
pub mod config;
pub mod gpu;
pub mod metrics;
pub mod notify;
pub mod process;
pub mod progress;
pub mod pruner;
pub mod sampler;
pub mod shortage;
pub mod store;
pub mod study;
pub mod supervisor;
pub mod units;
