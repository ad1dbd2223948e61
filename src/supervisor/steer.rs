//! The daemon's side of steering, run by housekeeping each pass ([`pass`]): the study's control
//! state read from the database (`sweepd pause`, `stop`, `cancel`, `resume`) and handed to the
//! core (`Core::set_steer`; `decide::gate` then says: paused, no trial starts; stopping or
//! cancelling, none starts and the slots end), the cancelled study's running trials stopped
//! (`study::control::decide` says `KillRequeue`), and the trials another process ended stopped
//! at once (`stops`). At start, [`at_start`] says whether the study was stopped or cancelled,
//! so that the run ends at once.

use super::shared::Shared;
use super::stops::stop_reason;
use crate::store::{Store, Study};
use crate::study::control::{decide, news, Situation, Steer};
use crate::study::{ControlState, StudyControl};
use tracing::{info, warn};

/// What a daemon about to run the study reads first: the control state (with the line it logs
/// about it), and whether it must exit at once (stopped or cancelled: `Steer::Exit`).
pub(super) async fn at_start(
    store: &Store,
    study: &Study,
) -> Result<(StudyControl, bool), crate::store::StoreError> {
    let control = store.control(study).await?;
    let situation = Situation {
        running: 0,
        starting: true,
    };
    if let Some(line) = news(None, &control, situation) {
        info!("{line}");
    }
    Ok((
        control.clone(),
        decide(control.state, situation) == Steer::Exit,
    ))
}

/// Housekeeping's pass: the control state read and applied ([`steer`]), the trials another
/// process ended stopped. Returns the pause's words, when paused by the owner.
pub(super) async fn pass(sh: &Shared, last: &mut Option<ControlState>) -> Option<String> {
    let paused = steer(sh, last).await;
    stop_ended_elsewhere(sh).await;
    paused
}

/// Reads the study's control state and applies it; `last`: the state last read (what the log
/// said). Returns the pause's words for the daemon row and the status line, when paused.
async fn steer(sh: &Shared, last: &mut Option<ControlState>) -> Option<String> {
    let control = match sh.store.control(&sh.study).await {
        Ok(c) => c,
        Err(e) => {
            warn!("could not read the study's control state (paused, stopped?): {e}");
            return None;
        }
    };
    let running = {
        let mut core = sh.core.lock().await;
        core.set_steer(control.state);
        core.running() as usize
    };
    let situation = Situation {
        running,
        starting: false,
    };
    if let Some(line) = news(*last, &control, situation) {
        info!("{line}");
    }
    *last = Some(control.state);
    let paused = control.state == ControlState::Paused;
    sh.metrics.set_paused(paused);
    if decide(control.state, situation) == Steer::KillRequeue {
        let why = format!("the study was cancelled ({control}); the trial is re-enqueued");
        for trial_id in sh.stops.running() {
            sh.stops.stop(trial_id, why.clone());
        }
    }
    paused.then(|| format!("{control}; no trial starts until `sweepd resume`"))
}

/// Stops the workers of our trials that another process ended: `sweepd kill`,
/// optuna-dashboard's fail, an Optuna script's `tell`, a host that failed this one over.
async fn stop_ended_elsewhere(sh: &Shared) {
    let ids = sh.stops.running();
    if ids.is_empty() {
        return;
    }
    let ended = match sh.store.ended_elsewhere(&ids).await {
        Ok(ended) => ended,
        Err(e) => {
            warn!("could not check whether another process ended our trials: {e}");
            return;
        }
    };
    for e in ended {
        if sh.stops.stop(e.trial_id, stop_reason(&e)) && e.killed_by.is_some() {
            sh.metrics.killed_by_hand();
        }
    }
}
