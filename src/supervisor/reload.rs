//! SIGHUP: the config file read again. The keys that may change live (the table in
//! `config::reload`) are applied to the running daemon; the others are reported as needing a
//! restart; an invalid file changes nothing.

use super::shared::Shared;
use crate::config::{Config, Overrides};
use std::sync::Arc;
use tracing::{error, info, warn};

/// SIGHUP: re-reads the config file. An invalid file is rejected and the running config kept;
/// of a valid one, the keys that can change safely are applied and the others reported.
pub(super) async fn reload(sh: &Shared) {
    let old = sh.cfg();
    // The command line (--par, PAR=N) wins over the file, across reloads too.
    let overrides = Overrides {
        max_par: sh.par_override,
    };
    let new = match Config::load_with(&old.path, &overrides) {
        Ok(c) => c,
        Err(e) => {
            error!("reload rejected, keeping the running config:\n{e}");
            return;
        }
    };
    let needs_restart = old.reload_diff(&new);
    let applied = Arc::new(old.apply_live(&new));
    if applied == old {
        info!("reload: nothing that can change live has changed");
    } else {
        info!(
            max_par = applied.worker.max_par,
            n_trials = applied.study.n_trials,
            "reload: applied the new config"
        );
    }
    if !needs_restart.is_empty() {
        warn!(
            "reload: these keys changed but need a restart to take effect: {}",
            needs_restart.join(", ")
        );
    }
    // The one copy: the core, the slots and admission read it at their next decision.
    sh.settings.swap(applied);
    sh.changed.notify_waiters();
}
