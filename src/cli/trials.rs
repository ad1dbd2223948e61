//! `sweepd trials`: the study's trials, oldest first, optionally of one state and the last few,
//! each with its duration, the step a pruned one was pruned at and its user attributes.

use super::args::{Output, StudyArg};
use super::csv;
use super::error::CliError;
use super::open::open_study;
use super::reasons::{self, Reasons};
use super::render::{print_json, trials_table};
use crate::study::TrialState;

pub(super) async fn trials(
    arg: &StudyArg,
    state: Option<TrialState>,
    limit: Option<u64>,
    output: Output,
) -> Result<(), CliError> {
    let opened = open_study(arg).await?;
    let mut trials = opened.store.trials(&opened.study, state, limit).await?;
    // A file only Optuna has written has no daemon, so no reasons.
    if opened.store.has_sweepd_tables().await? {
        let hosts = opened.store.hosts(&opened.study).await?;
        let gone_after = reasons::gone_after(&opened.store, opened.config.as_ref());
        Reasons::read(
            &opened.store,
            &opened.study,
            &hosts,
            gone_after,
            opened.config.as_ref(),
        )
        .await?
        .fill(&mut trials);
    }
    match output {
        Output::Json => print_json(
            &trials
                .iter()
                .map(|t| {
                    let mut v = serde_json::json!(t);
                    v["duration_s"] = csv::duration_s(t).into();
                    v["pruned_step"] = csv::pruned_step(t).into();
                    v
                })
                .collect::<Vec<_>>(),
        ),
        Output::Csv => {
            // Every param the study has, not only those of the rows shown.
            let mut names = opened.static_names();
            names.extend(opened.store.param_names(&opened.study).await?);
            csv::trials(&opened.study, &trials, names)
        }
        Output::Text => print!("{}", trials_table(&trials)),
    }
    Ok(())
}
