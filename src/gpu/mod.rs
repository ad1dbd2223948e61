//! GPUs: what the driver says about them, and whether one has room for another trial.
//!
//! The room exists because placing trials by measured memory, not by a hand-tuned `PAR`, needs
//! things that only make sense together, and that nothing else in sweepd should know:
//! - [`nvml`]: readings of each device (memory, utilization, compute processes) through NVIDIA's
//!   NVML, via `nvml-wrapper` (blocking FFI: async callers use `spawn_blocking`);
//! - [`monitor`]: those readings attributed to our trials (and our idle workers) by process
//!   group, with each trial's peak, and the orphans of retired workers killed; where NVML
//!   cannot name our processes (a container's PID namespace, MIG), by what the workers'
//!   frameworks report ([`source`]: which, and why);
//! - [`admission`] and [`memory_model`]: pure rules, no I/O. Admission says whether a device
//!   takes a trial of a given expected peak now (and why not), and which idle workers make room
//!   for it; the memory model says what peak to expect of a trial from the measured peaks of
//!   finished ones (a regression that learns which params drive memory, with a bound calibrated
//!   from its own errors). Users' view of both: `docs/gpu-memory-model.md`;
//! - [`ledger`]: the file that daemons on one host share, so that each counts what the others'
//!   trials have yet to allocate;
//! - [`peak_log`]: the file that the daemons of one `[gpu] memory_group` on a host share their
//!   measured peaks and their running trials' levels through, so that each memory model learns
//!   from the trials of all;
//! - [`runtime_dir`]: where the ledger and the peak logs live, opened so that no other user can
//!   steer them.
//!
//! The supervisor drives them all: it polls the monitor, hands its readings to admission with
//! the memory model's estimate and the other daemons' claims, and feeds each finished trial's
//! peak back to the model.
//!
//! Layers, lowest first: a file imports only files of the layers below it (read from the `use`
//! lines), so that none imports a file that imports it back.
//! 1. [`nvml`], [`runtime_dir`], [`source`], `ledger/entry.rs`, `memory_model/tuning.rs` (the
//!    model's constants): nothing of this folder;
//! 2. `ledger/text.rs` and `ledger/valid.rs` (the entries), `memory_model/fit.rs` (the
//!    constants);
//! 3. [`ledger`] (`ledger/mod.rs`: entries, text, valid, the runtime directory) and
//!    [`memory_model`] (`memory_model/mod.rs`: fit, constants; its unit tests in
//!    `memory_model/tests.rs` read it);
//! 4. [`admission`] (the ledger's requests) and [`peak_log`] (the ledger's owners, the runtime
//!    directory);
//! 5. [`monitor`] (admission's views of devices and trials, its `settled_margin` and
//!    `CONTEXT_PRIOR`, nvml, source);
//! 6. this file, which declares and re-exports them and which none of them imports. Sizes in
//!    messages are written by `crate::units`.

pub mod admission;
pub mod ledger;
pub mod memory_model;
pub mod monitor;
pub mod nvml;
pub mod peak_log;
pub mod runtime_dir;
pub mod source;

pub use admission::{Capacity, Decision, IdleWorker, Reclaim};
pub use ledger::Ledger;
pub use memory_model::{Aim, Estimate, MemoryModel};
pub use monitor::Monitor;
pub use nvml::Gpu;
pub use peak_log::PeakLog;
