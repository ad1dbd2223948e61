//! GPUs: what the driver says about them, and whether one has room for another trial.
//!
//! The room exists because placing trials by measured memory, not by a hand-tuned `PAR`, needs
//! three things that only make sense together, and that nothing else in sweepd should know:
//! - [`nvml`]: readings of each device (memory, utilization, compute processes) through NVIDIA's
//!   NVML, via `nvml-wrapper` (blocking FFI: async callers use `spawn_blocking`);
//! - [`monitor`]: those readings attributed to our trials by process group, with each trial's
//!   peak, and the orphans of retired workers killed;
//! - [`admission`] and [`memory_model`]: pure rules, no I/O. Admission says whether a device
//!   takes a trial of a given expected peak now (and why not); the memory model says what peak
//!   to expect of a trial from the measured peaks of finished ones. Users' view of both:
//!   `docs/gpu-memory-model.md`.
//!
//! The supervisor drives all four: it polls the monitor, hands its readings to admission with
//! the memory model's estimate, and feeds each finished trial's peak back to the model.

pub mod admission;
pub mod memory_model;
pub mod monitor;
pub mod nvml;

pub use admission::{Capacity, Decision};
pub use memory_model::MemoryModel;
pub use monitor::Monitor;
pub use nvml::Gpu;

/// Bytes as GiB with one decimal ("6.0 GiB"), the unit every capacity message uses.
pub fn fmt_gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / GIB)
}

const GIB: f64 = (1u64 << 30) as f64;
