//! `sweepd gpus`: the GPUs as the running daemon last read them (memory, PAR per device, why the
//! next trial waits), from the database; a row whose daemon does not run is its last reading.

use super::args::{Output, StudyArg};
use super::csv;
use super::error::CliError;
use super::liveness::{liveness, Here};
use super::open::{open_study, Opened};
use super::reasons::gone_after;
use super::render::{gpus_table, print_json};
use crate::supervisor;

pub(super) async fn gpus(arg: &StudyArg, output: Output) -> Result<(), CliError> {
    let Opened {
        store,
        study,
        config,
        ..
    } = open_study(arg).await?;
    let rows = store.gpus(&study).await?;
    let (here, gone_after) = (Here::read(), gone_after(&store, config.as_ref()));
    let running: Vec<String> = store
        .daemons(&study)
        .await?
        .into_iter()
        .filter(|d| liveness(d, &here, gone_after, supervisor::pid_runs).runs())
        .map(|d| d.host)
        .collect();
    let runs = |host: &str| running.iter().any(|h| h == host);
    match output {
        Output::Json => print_json(
            &rows
                .iter()
                .map(|r| {
                    let mut v = serde_json::json!(r);
                    v["daemon_running"] = runs(&r.host).into();
                    v
                })
                .collect::<Vec<_>>(),
        ),
        Output::Csv => csv::gpus(&rows),
        Output::Text if rows.is_empty() => println!(
            "no GPU readings: the study runs CPU-only, or its daemon has not read NVML yet"
        ),
        Output::Text => print!("{}", gpus_table(&rows, runs)),
    }
    Ok(())
}
