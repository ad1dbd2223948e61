//! `sweepd pause`, `resume`, `stop`, `cancel`: the study's control state, set through the
//! database for every daemon of the study on every host, and kept there (a paused study stays
//! paused across restarts; a stopped or cancelled one is not run again until `resume`). What a
//! daemon does under each state is `study::control::decide`. `resume` keeps its older meaning
//! too: the running daemons lift their circuit breaker's quarantines.

use super::args::StudyArg;
use super::error::CliError;
use super::open::open_study_to_steer;
use super::render::print_json;
use super::steering::{daemons_json, daemons_text, live_daemons, who};
use crate::store::DaemonView;
use crate::study::control::{transition, Transition};
use crate::study::{ControlState, StudyControl};
use serde_json::json;

/// Sets the study's control state to `to` (`resume`: RUNNING, and the breaker lifted) and
/// says what follows from it.
pub(super) async fn set(arg: &StudyArg, to: ControlState, json: bool) -> Result<(), CliError> {
    let opened = open_study_to_steer(arg).await?;
    let (user, host) = who()?;
    let (store, study) = (&opened.store, &opened.study);
    let before = match to {
        ControlState::Running => store.resume(study, &user, &host).await?,
        _ => store.set_control(study, to, &user, &host).await?,
    };
    let now = store.control(study).await?;
    let daemons = live_daemons(&opened).await?;
    if json {
        print_json(&json!({
            "study": study.name,
            "state": now.state,
            "changed": transition(before.state, to) != Transition::Already,
            "was": before,
            "now": now,
            "daemons": daemons_json(&daemons),
        }));
    } else {
        println!("{}", said(&study.name, to, &before, &daemons));
    }
    Ok(())
}

/// What a steering command tells the person: what changed, what the daemons running the study
/// do about it, and what happens to the next `sweepd run`.
fn said(study: &str, to: ControlState, before: &StudyControl, daemons: &[DaemonView]) -> String {
    let who = daemons_text(daemons);
    let none = daemons.is_empty();
    // "the daemon … exits", "the 2 daemons … exit".
    let s = if daemons.len() > 1 { "" } else { "s" };
    let was = match transition(before.state, to) {
        Transition::Already if to == ControlState::Running => {
            // Today's meaning of `resume` holds whatever the state was.
            return if none {
                format!(
                    "study `{study}` is RUNNING (nothing paused or stopped it); no daemon runs \
                     it now: start one with `sweepd run`"
                )
            } else {
                format!(
                    "study `{study}` is RUNNING (nothing paused or stopped it); {who} lift{s} \
                     the circuit breaker's quarantines within a second"
                )
            };
        }
        Transition::Already => {
            return format!("study `{study}` is {before} already: nothing changed");
        }
        Transition::Changed(_) => format!("was {before}"),
    };
    let verb = match to {
        ControlState::Running => "resumed",
        ControlState::Paused => "paused",
        ControlState::Stopping => "stopped",
        ControlState::Cancelling => "cancelled",
    };
    let follows = match (to, none) {
        (ControlState::Running, true) => {
            "trials start again once a daemon runs it: none does now (`sweepd run`)".to_owned()
        }
        (ControlState::Running, false) => format!(
            "trials start again; {who} lift{s} the circuit breaker's quarantines within a \
             second"
        ),
        (ControlState::Paused, true) => "no daemon runs it now; the next `sweepd run` starts \
             paused and waits for `sweepd resume`"
            .to_owned(),
        (ControlState::Paused, false) => format!(
            "no trial starts; running trials go on to their end, and {who} wait{s} for `sweepd \
             resume`"
        ),
        (ControlState::Stopping, true) => "no daemon runs it now; `sweepd run` (and a restart by \
             systemd) exits 0 at once until `sweepd resume`"
            .to_owned(),
        (ControlState::Stopping, false) => format!(
            "no trial starts; running trials go on to their end, then {who} exit{s} 0; `sweepd \
             run` exits 0 at once until `sweepd resume`"
        ),
        (ControlState::Cancelling, true) => "no daemon runs it now; `sweepd run` (and a restart \
             by systemd) exits 0 at once until `sweepd resume`"
            .to_owned(),
        (ControlState::Cancelling, false) => format!(
            "running trials are killed and re-enqueued (they run again after `sweepd resume`), \
             then {who} exit{s} 0; `sweepd run` exits 0 at once until `sweepd resume`"
        ),
    };
    format!("study `{study}` {verb} ({was}): {follows}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::DaemonState;

    fn daemon(host: &str, pid: i64) -> DaemonView {
        DaemonView {
            pid,
            host: host.into(),
            started_at: "2026-01-01 00:00:00".into(),
            heartbeat_at: "2026-01-01 00:00:01".into(),
            age_s: Some(0.5),
            state: DaemonState::Running,
            detail: None,
            pid_start: None,
            instance: Default::default(),
        }
    }

    fn control(state: ControlState) -> StudyControl {
        StudyControl {
            state,
            since: Some("2026-01-02 03:04:05.000001".into()),
            by: Some("ana@node1".into()),
        }
    }

    #[test]
    fn each_command_says_what_changed_and_what_the_daemons_do() {
        let one = [daemon("node1", 42)];
        let two = [daemon("node1", 42), daemon("node2", 7)];
        let cases: [(ControlState, StudyControl, &[DaemonView], &str); 9] = [
            (
                ControlState::Paused,
                StudyControl::default(),
                &one,
                "study `s` paused (was RUNNING): no trial starts; running trials go on to their \
                 end, and the daemon on node1 (pid 42) waits for `sweepd resume`",
            ),
            (
                ControlState::Paused,
                StudyControl::default(),
                &[],
                "study `s` paused (was RUNNING): no daemon runs it now; the next `sweepd run` \
                 starts paused and waits for `sweepd resume`",
            ),
            (
                ControlState::Paused,
                control(ControlState::Paused),
                &one,
                "study `s` is PAUSED by ana@node1 at 2026-01-02 03:04:05 (`sweepd pause`) \
                 already: nothing changed",
            ),
            (
                ControlState::Stopping,
                control(ControlState::Paused),
                &two,
                "study `s` stopped (was PAUSED by ana@node1 at 2026-01-02 03:04:05 (`sweepd \
                 pause`)): no trial starts; running trials go on to their end, then the 2 \
                 daemons on node1 (pid 42), node2 (pid 7) exit 0; `sweepd run` exits 0 at \
                 once until `sweepd resume`",
            ),
            (
                ControlState::Stopping,
                StudyControl::default(),
                &[],
                "study `s` stopped (was RUNNING): no daemon runs it now; `sweepd run` (and a \
                 restart by systemd) exits 0 at once until `sweepd resume`",
            ),
            (
                ControlState::Cancelling,
                StudyControl::default(),
                &one,
                "study `s` cancelled (was RUNNING): running trials are killed and re-enqueued \
                 (they run again after `sweepd resume`), then the daemon on node1 (pid 42) \
                 exits 0; `sweepd run` exits 0 at once until `sweepd resume`",
            ),
            (
                ControlState::Running,
                control(ControlState::Stopping),
                &[],
                "study `s` resumed (was STOPPING by ana@node1 at 2026-01-02 03:04:05 (`sweepd \
                 stop`)): trials start again once a daemon runs it: none does now (`sweepd run`)",
            ),
            (
                ControlState::Running,
                StudyControl::default(),
                &one,
                "study `s` is RUNNING (nothing paused or stopped it); the daemon on node1 (pid \
                 42) lifts the circuit breaker's quarantines within a second",
            ),
            (
                ControlState::Running,
                StudyControl::default(),
                &[],
                "study `s` is RUNNING (nothing paused or stopped it); no daemon runs it now: \
                 start one with `sweepd run`",
            ),
        ];
        for (to, before, daemons, want) in cases {
            assert_eq!(said("s", to, &before, daemons), want, "{to} from {before}");
        }
    }
}
