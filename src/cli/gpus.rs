//! `sweepd gpus`: the GPUs as the running daemon last read them (memory, PAR per device, why the
//! next trial waits), from the database.

use super::args::{Output, StudyArg};
use super::csv;
use super::error::CliError;
use super::open::{open_study, Opened};
use super::render::{gpus_table, print_json};

pub(super) async fn gpus(arg: &StudyArg, output: Output) -> Result<(), CliError> {
    let Opened { store, study, .. } = open_study(arg).await?;
    let rows = store.gpus(&study).await?;
    match output {
        Output::Json => print_json(&rows),
        Output::Csv => csv::gpus(&rows),
        Output::Text if rows.is_empty() => println!(
            "no GPU readings: the study runs CPU-only, or its daemon has not read NVML yet"
        ),
        Output::Text => print!("{}", gpus_table(&rows)),
    }
    Ok(())
}
