//! Regression tests for issue 39's hostile-neighbour defects: each is named after the failure
//! it pins and failed before its fix.
#[path = "../common/mod.rs"]
mod common;
mod doors;
mod fake_nvml;
mod hosts;
mod ledger;
mod protocol;
