//! `sweepd kill TRIAL [--prune]`: ends one RUNNING or WAITING trial by hand, through the
//! database, from any host: FAIL and never retried, or PRUNED with its last report as its value
//! (Optuna's record of a pruned trial). The daemon that runs it stops its worker when it sees
//! the trial ended (`Store::ended_elsewhere`).

use super::args::StudyArg;
use super::error::CliError;
use super::open::open_study_to_steer;
use super::render::print_json;
use super::steering::{daemons_text, live_daemons, who};
use crate::store::{DaemonView, KillRefused, Killed};
use crate::study::TrialState;
use serde_json::json;

pub(super) async fn kill(
    arg: &StudyArg,
    number: i64,
    prune: bool,
    json: bool,
) -> Result<(), CliError> {
    let opened = open_study_to_steer(arg).await?;
    let (user, host) = who()?;
    let by = format!("{user}@{host}");
    let killed = opened
        .store
        .kill_trial(&opened.study, number, prune, &by)
        .await?
        .map_err(|why| refused(&opened.study.name, &why))?;
    let daemons = live_daemons(&opened).await?;
    if json {
        print_json(&json!({
            "study": opened.study.name,
            "trial": killed.number,
            "trial_id": killed.trial_id,
            "was": killed.was,
            "state": killed.now,
            "value": killed.value,
            "by": by,
        }));
    } else {
        println!("{}", said(&killed, &daemons));
    }
    Ok(())
}

/// The error for a kill the study refused.
fn refused(study: &str, why: &KillRefused) -> CliError {
    match why {
        KillRefused::NoTrial(n) => CliError::Usage(format!(
            "study `{study}` has no trial {n} (numbers as `sweepd trials` shows them)"
        )),
        KillRefused::Final {
            number,
            state,
            retried_as: Some(copy),
        } => CliError::Refused(format!(
            "trial {number} is {state} already: it was retried as trial {copy} (`sweepd kill \
             {copy}` ends the retry)"
        )),
        KillRefused::Final { number, state, .. } => CliError::Refused(format!(
            "trial {number} is {state} already: only a RUNNING or WAITING trial can be killed"
        )),
    }
}

/// What `kill` tells the person it did.
fn said(k: &Killed, daemons: &[DaemonView]) -> String {
    let how = match (k.now, k.value) {
        (TrialState::Pruned, Some(v)) => format!("PRUNED by hand, value {v} (its last report)"),
        (TrialState::Pruned, None) => "PRUNED by hand (no report: no value)".to_owned(),
        _ => "FAIL, killed by hand, not retried".to_owned(),
    };
    let then = match (k.was, daemons.is_empty()) {
        (TrialState::Waiting, _) => "; it never ran".to_owned(),
        (_, true) => "; no daemon runs the study now".to_owned(),
        (_, false) => format!(
            "; {} stops its worker when it sees the trial ended",
            if daemons.len() == 1 {
                daemons_text(daemons)
            } else {
                "the daemon running it".to_owned()
            }
        ),
    };
    format!("trial {}: {} → {how}{then}", k.number, k.was)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn killed(was: TrialState, now: TrialState, value: Option<f64>) -> Killed {
        Killed {
            trial_id: 8,
            number: 7,
            was,
            now,
            value,
        }
    }

    #[test]
    fn kill_says_what_the_trial_became_and_who_stops_its_worker() {
        use TrialState::*;
        let one = [DaemonView {
            pid: 42,
            host: "node1".into(),
            started_at: String::new(),
            heartbeat_at: String::new(),
            age_s: Some(0.1),
            state: crate::study::DaemonState::Running,
            detail: None,
            pid_start: None,
            instance: Default::default(),
        }];
        let cases: [(Killed, &[DaemonView], &str); 4] = [
            (
                killed(Running, Fail, None),
                &one,
                "trial 7: RUNNING → FAIL, killed by hand, not retried; the daemon on node1 \
                 (pid 42) stops its worker when it sees the trial ended",
            ),
            (
                killed(Running, Fail, None),
                &[],
                "trial 7: RUNNING → FAIL, killed by hand, not retried; no daemon runs the \
                 study now",
            ),
            (
                killed(Running, Pruned, Some(0.25)),
                &[],
                "trial 7: RUNNING → PRUNED by hand, value 0.25 (its last report); no daemon \
                 runs the study now",
            ),
            (
                killed(Waiting, Fail, None),
                &one,
                "trial 7: WAITING → FAIL, killed by hand, not retried; it never ran",
            ),
        ];
        for (k, daemons, want) in cases {
            assert_eq!(said(&k, daemons), want);
        }
    }

    #[test]
    fn a_kill_refused_says_why_and_what_to_do() {
        let e = refused("s", &KillRefused::NoTrial(99));
        assert_eq!(e.exit_code(), 2);
        assert_eq!(
            e.to_string(),
            "study `s` has no trial 99 (numbers as `sweepd trials` shows them)"
        );
        let e = refused(
            "s",
            &KillRefused::Final {
                number: 3,
                state: TrialState::Complete,
                retried_as: None,
            },
        );
        assert_eq!(e.exit_code(), 1);
        assert_eq!(
            e.to_string(),
            "trial 3 is COMPLETE already: only a RUNNING or WAITING trial can be killed"
        );
        let e = refused(
            "s",
            &KillRefused::Final {
                number: 3,
                state: TrialState::Fail,
                retried_as: Some(9),
            },
        );
        assert_eq!(
            e.to_string(),
            "trial 3 is FAIL already: it was retried as trial 9 (`sweepd kill 9` ends the retry)"
        );
    }
}
