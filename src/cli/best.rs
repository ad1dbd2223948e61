//! `sweepd best`: the best COMPLETE trial; with several objectives, the Pareto front (Optuna's
//! `study.best_trials`), in trial order.

use super::args::{Output, StudyArg};
use super::csv;
use super::error::CliError;
use super::open::{open_study, Opened};
use super::render::{objectives_text, print_json, trials_table};
use crate::store::TrialView;
use serde_json::Value;

pub(super) async fn best(arg: &StudyArg, output: Output) -> Result<(), CliError> {
    let opened = open_study(arg).await?;
    if opened.study.is_multi_objective() {
        return front(&opened, output).await;
    }
    let best = opened.store.best(&opened.study).await?;
    match (output, best) {
        (Output::Csv, b) => csv::trials(&opened.study, b.as_slice(), opened.static_names()),
        (Output::Json, b) => print_json(&b),
        (Output::Text, Some(b)) => println!(
            "best: trial {} value {} params {}",
            b.number,
            b.value,
            Value::Object(b.params)
        ),
        (Output::Text, None) => println!("no COMPLETE trial yet"),
    }
    Ok(())
}

/// The Pareto front of a study with several objectives.
async fn front(opened: &Opened, output: Output) -> Result<(), CliError> {
    let study = &opened.study;
    let front: Vec<TrialView> = opened
        .store
        .best_trials(study)
        .await?
        .into_iter()
        .map(|t| t.1)
        .collect();
    match output {
        Output::Json => print_json(&front),
        Output::Csv => csv::trials(study, &front, opened.static_names()),
        Output::Text if front.is_empty() => {
            println!("no feasible COMPLETE trial yet: the Pareto front is empty")
        }
        Output::Text => {
            println!(
                "Pareto front: {} trials ({})",
                front.len(),
                objectives_text(study)
            );
            print!("{}", trials_table(&front));
        }
    }
    Ok(())
}
