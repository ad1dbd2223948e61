//! `sweepd resume`: asks the running daemon, through the database, to lift its circuit
//! breaker's quarantines.

use super::args::StudyArg;
use super::error::CliError;
use super::open::{open_study, Opened};
use crate::study::DaemonCommand;

pub(super) async fn resume(arg: &StudyArg) -> Result<(), CliError> {
    let Opened { store, study, .. } = open_study(arg).await?;
    store.send_command(&study, DaemonCommand::Resume).await?;
    println!("resume requested: the running daemon lifts its quarantines within a second");
    Ok(())
}
