//! The config in force: one copy for the whole daemon, which every component reads at each
//! decision and a reload (SIGHUP) swaps whole. Nothing keeps a field of it aside: the retry
//! policy, the breaker, the same-error stop and GPU admission take what they need from the
//! `Arc<Config>` they are handed, so a reload has one thing to update.
//!
//! A `std::sync::RwLock<Arc<Config>>`: a read is a lock and an `Arc` clone, a few per trial, and
//! a writer is a reload now and then; a crate for lock-free swaps (`arc-swap`) would save
//! nothing measurable here.

use crate::config::Config;
use std::sync::{Arc, RwLock};

/// The config in force, shared: clones read and swap the same one.
#[derive(Clone)]
pub(super) struct Settings(Arc<RwLock<Arc<Config>>>);

impl Settings {
    pub(super) fn new(config: Arc<Config>) -> Settings {
        Settings(Arc::new(RwLock::new(config)))
    }

    /// The config in force now: a decision reads it once and holds it to the end, so that a
    /// reload meanwhile does not give it half of one config and half of the next.
    pub(super) fn get(&self) -> Arc<Config> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A reload: from now on every reader gets `new`.
    pub(super) fn swap(&self, new: Arc<Config>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_is_seen_by_every_clone_and_a_reader_keeps_what_it_read() {
        let dir = tempfile::tempdir().unwrap();
        let text = |n: u32| {
            format!(
                "[study]\nname = \"s\"\nn_trials = {n}\n[worker]\ncommand = [\"python\", \"t.py\"]\n\
                 [params.x]\ntype = \"float\"\nlow = 0.0\nhigh = 1.0\n"
            )
        };
        let path = dir.path().join("supervisor.toml");
        let first = Arc::new(Config::parse(&text(5), &path).unwrap());
        let settings = Settings::new(first);
        let other = settings.clone();
        let held = settings.get();
        other.swap(Arc::new(Config::parse(&text(9), &path).unwrap()));
        assert_eq!(settings.get().study.n_trials, Some(9));
        assert_eq!(held.study.n_trials, Some(5));
    }
}
