//! GPUs: what the driver says about them, and whether one has room for another trial.

pub mod admission;
pub mod monitor;
pub mod nvml;

pub use admission::{Capacity, Decision, MemoryModel};
pub use monitor::Monitor;
pub use nvml::Gpu;
