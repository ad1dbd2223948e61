//! What a person asked of the whole study (`sweepd pause`, `stop`, `cancel`, `resume`), and what
//! a daemon does about it. The ask is a *state* of the study, kept in the database
//! (`sweepd_control`), not a message to one process: every daemon of the study, on every host,
//! reads it each housekeeping tick, and a daemon started later reads it too, so a paused study
//! stays paused across restarts and a stopped one is not started again silently (by systemd's
//! `Restart=`, a reboot, a person who forgot).
//!
//! The rules are here, pure and table-tested: [`transition`] (what a command changes, and what
//! it tells the person), [`decide`] (what a daemon in a given situation does under a state).
//! Reading and writing the state is the store's (`Store::control`, `Store::set_control`); doing
//! what [`decide`] says is the daemon's.

use super::trial::UnknownName;
use std::fmt;
use std::str::FromStr;

spelled! {
    /// What the study's owner asked of every daemon of the study (`sweepd_control.state`). A
    /// study without a row is `Running`.
    ControlState, "control state" {
        /// Run as the budget allows (the default; `sweepd resume`).
        Running => "RUNNING",
        /// `sweepd pause`: start no trial; running ones finish; daemons stay up and wait.
        Paused => "PAUSED",
        /// `sweepd stop`: start no trial; running ones finish; then every daemon exits 0, and
        /// `sweepd run` exits 0 at once until `sweepd resume`.
        Stopping => "STOPPING",
        /// `sweepd cancel`: running trials are killed and re-enqueued (FAIL `interrupted` with
        /// a WAITING copy); every daemon exits 0, and `sweepd run` exits 0 at once until
        /// `sweepd resume`.
        Cancelling => "CANCELLING",
    }
}

impl ControlState {
    /// The command that asks for this state.
    pub fn command(&self) -> &'static str {
        match self {
            ControlState::Running => "sweepd resume",
            ControlState::Paused => "sweepd pause",
            ControlState::Stopping => "sweepd stop",
            ControlState::Cancelling => "sweepd cancel",
        }
    }

    /// Whether a daemon under this state may start trials.
    pub fn starts_trials(&self) -> bool {
        *self == ControlState::Running
    }

    /// Whether the daemons of the study end (`stop`, `cancel`).
    pub fn ends_daemons(&self) -> bool {
        matches!(self, ControlState::Stopping | ControlState::Cancelling)
    }
}

/// The study's control state as recorded: what, since when, asked by whom.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StudyControl {
    pub state: ControlState,
    /// When it was asked (the database's local time, as Optuna's times); `None` for a study
    /// nobody steered yet.
    pub since: Option<String>,
    /// Who asked: `user@host`; `None` for a study nobody steered yet.
    pub by: Option<String>,
}

impl Default for StudyControl {
    fn default() -> StudyControl {
        StudyControl {
            state: ControlState::Running,
            since: None,
            by: None,
        }
    }
}

impl fmt::Display for StudyControl {
    /// "PAUSED by ana@node1 at 2026-01-01 10:00:00 (`sweepd pause`)", or "RUNNING".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.state)?;
        if let Some(by) = &self.by {
            write!(f, " by {by}")?;
        }
        if let Some(since) = &self.since {
            // Whole seconds: the fraction is noise to a person.
            let shown = since.split('.').next().unwrap_or(since);
            write!(f, " at {shown}")?;
        }
        if self.by.is_some() {
            write!(f, " (`{}`)", self.state.command())?;
        }
        Ok(())
    }
}

/// What a steering command does to the study's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The state changes from the one given.
    Changed(ControlState),
    /// The study was in that state already: the command changes nothing (`resume` still lifts
    /// the breaker's quarantines).
    Already,
}

/// What asking for `to` does to a study in `from`. The latest ask wins: a paused study may be
/// stopped, a stopping one cancelled, a cancelled one paused (its next `sweepd run` then
/// starts paused instead of exiting).
pub fn transition(from: ControlState, to: ControlState) -> Transition {
    if from == to {
        Transition::Already
    } else {
        Transition::Changed(from)
    }
}

/// What a daemon knows of itself when it reads the control state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Situation {
    /// Trials this daemon runs now.
    pub running: usize,
    /// The daemon is starting: it has not started a trial yet (`sweepd run` just began).
    pub starting: bool,
}

/// What a daemon does under the study's control state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steer {
    /// Start trials as the budget allows.
    Go,
    /// Start none; running trials go on to their end; stay up, heartbeating, and read the
    /// state again next tick (paused).
    Hold,
    /// Start none; running trials go on to their end; exit 0 when none is left.
    Drain,
    /// Start none; kill the running trials now (`Store::interrupt`: FAIL `interrupted` with a
    /// WAITING copy each), then exit 0.
    KillRequeue,
    /// Exit 0 now: nothing of ours runs. At start, say how the study was stopped and that
    /// `sweepd resume` runs it again.
    Exit,
}

/// The one rule: what a daemon in `situation` does under `state`.
pub fn decide(state: ControlState, situation: Situation) -> Steer {
    let idle = situation.running == 0;
    match state {
        ControlState::Running => Steer::Go,
        ControlState::Paused => Steer::Hold,
        ControlState::Stopping | ControlState::Cancelling if idle => Steer::Exit,
        ControlState::Stopping => Steer::Drain,
        ControlState::Cancelling => Steer::KillRequeue,
    }
}

/// The line a daemon logs when it finds the study in `now` (at start, or changed since its last
/// read, `before`); `None` when there is nothing new to say.
pub fn news(
    before: Option<ControlState>,
    now: &StudyControl,
    situation: Situation,
) -> Option<String> {
    if before == Some(now.state) {
        return None;
    }
    let n = situation.running;
    let running = |one: &str, many: &str| match n {
        0 => String::new(),
        1 => format!("; the running trial {one}"),
        n => format!("; the {n} running trials {many}"),
    };
    let finish = running("goes on to its end", "go on to their end");
    Some(match (now.state, situation.starting) {
        (ControlState::Running, _) if before.is_none() => return None,
        (ControlState::Running, _) => format!("study resumed: {now}"),
        (ControlState::Paused, _) => {
            format!("study paused: {now}; no trial starts until `sweepd resume`{finish}")
        }
        (ControlState::Stopping | ControlState::Cancelling, true) => {
            format!("study stopped: {now}; exiting; `sweepd resume` to run it again")
        }
        (ControlState::Stopping, false) => {
            format!("study stopping: {now}; no trial starts{finish}, then this daemon exits")
        }
        (ControlState::Cancelling, false) => format!(
            "study cancelled: {now}; no trial starts{}, then this daemon exits",
            running("is killed and re-enqueued", "are killed and re-enqueued")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    const RUN: ControlState = ControlState::Running;
    const PAUSE: ControlState = ControlState::Paused;
    const STOP: ControlState = ControlState::Stopping;
    const CANCEL: ControlState = ControlState::Cancelling;

    fn at(running: usize, starting: bool) -> Situation {
        Situation { running, starting }
    }

    #[rstest]
    #[case::running_starts_trials(RUN, at(0, true), Steer::Go)]
    #[case::running_with_trials(RUN, at(3, false), Steer::Go)]
    #[case::paused_at_start_waits(PAUSE, at(0, true), Steer::Hold)]
    #[case::paused_lets_running_trials_finish(PAUSE, at(2, false), Steer::Hold)]
    #[case::paused_idle_stays_up(PAUSE, at(0, false), Steer::Hold)]
    #[case::stopped_at_start_exits_at_once(STOP, at(0, true), Steer::Exit)]
    #[case::stopping_drains_running_trials(STOP, at(2, false), Steer::Drain)]
    #[case::stopping_exits_once_drained(STOP, at(0, false), Steer::Exit)]
    #[case::cancelled_at_start_exits_at_once(CANCEL, at(0, true), Steer::Exit)]
    #[case::cancelling_kills_running_trials(CANCEL, at(1, false), Steer::KillRequeue)]
    #[case::cancelling_exits_once_none_runs(CANCEL, at(0, false), Steer::Exit)]
    fn a_daemon_does_what_the_study_s_control_state_asks(
        #[case] state: ControlState,
        #[case] situation: Situation,
        #[case] want: Steer,
    ) {
        assert_eq!(decide(state, situation), want);
    }

    #[test]
    fn only_a_running_study_starts_trials_and_only_stop_and_cancel_end_daemons() {
        for s in ControlState::ALL {
            let starts = decide(*s, at(0, false)) == Steer::Go;
            assert_eq!(s.starts_trials(), starts, "{s}");
            let ends = matches!(decide(*s, at(1, false)), Steer::Drain | Steer::KillRequeue);
            assert_eq!(s.ends_daemons(), ends, "{s}");
        }
    }

    #[rstest]
    #[case(RUN, PAUSE, Transition::Changed(RUN))]
    #[case(PAUSE, PAUSE, Transition::Already)]
    #[case(PAUSE, STOP, Transition::Changed(PAUSE))]
    #[case(STOP, CANCEL, Transition::Changed(STOP))]
    #[case(CANCEL, PAUSE, Transition::Changed(CANCEL))]
    #[case(CANCEL, RUN, Transition::Changed(CANCEL))]
    #[case(RUN, RUN, Transition::Already)]
    fn the_latest_ask_wins_and_a_repeated_one_changes_nothing(
        #[case] from: ControlState,
        #[case] to: ControlState,
        #[case] want: Transition,
    ) {
        assert_eq!(transition(from, to), want);
    }

    fn control(state: ControlState) -> StudyControl {
        StudyControl {
            state,
            since: Some("2026-01-02 03:04:05.678901".into()),
            by: Some("ana@node1".into()),
        }
    }

    #[test]
    fn a_control_state_names_who_asked_when_and_with_which_command() {
        assert_eq!(
            control(STOP).to_string(),
            "STOPPING by ana@node1 at 2026-01-02 03:04:05 (`sweepd stop`)"
        );
        assert_eq!(StudyControl::default().to_string(), "RUNNING");
    }

    #[rstest]
    #[case::first_read_of_a_running_study(None, RUN, at(0, true), None)]
    #[case::unchanged(Some(PAUSE), PAUSE, at(1, false), None)]
    #[case::resumed(
        Some(PAUSE),
        RUN,
        at(0, false),
        Some("study resumed: RUNNING by ana@node1 at 2026-01-02 03:04:05 (`sweepd resume`)")
    )]
    #[case::paused_at_start(None, PAUSE, at(0, true), Some("study paused: PAUSED by ana@node1 at 2026-01-02 03:04:05 (`sweepd pause`); no trial starts until `sweepd resume`"))]
    #[case::paused_while_running(Some(RUN), PAUSE, at(2, false), Some("study paused: PAUSED by ana@node1 at 2026-01-02 03:04:05 (`sweepd pause`); no trial starts until `sweepd resume`; the 2 running trials go on to their end"))]
    #[case::stopped_at_start(None, STOP, at(0, true), Some("study stopped: STOPPING by ana@node1 at 2026-01-02 03:04:05 (`sweepd stop`); exiting; `sweepd resume` to run it again"))]
    #[case::stopping(Some(RUN), STOP, at(1, false), Some("study stopping: STOPPING by ana@node1 at 2026-01-02 03:04:05 (`sweepd stop`); no trial starts; the running trial goes on to its end, then this daemon exits"))]
    #[case::cancelled(Some(PAUSE), CANCEL, at(2, false), Some("study cancelled: CANCELLING by ana@node1 at 2026-01-02 03:04:05 (`sweepd cancel`); no trial starts; the 2 running trials are killed and re-enqueued, then this daemon exits"))]
    fn a_daemon_says_once_what_the_study_s_owner_asked(
        #[case] before: Option<ControlState>,
        #[case] now: ControlState,
        #[case] situation: Situation,
        #[case] want: Option<&str>,
    ) {
        let now = StudyControl {
            state: now,
            ..control(now)
        };
        assert_eq!(news(before, &now, situation).as_deref(), want);
    }
}
