//! `sweepd run`: the daemon in the foreground, the signals that stop it or reload its config,
//! the live display at a terminal, and the line that sums the study up when it ends.

use super::args::LogFormat;
use super::error::CliError;
use super::logging::{init_logging, wants_display};
use crate::config::{Config, Overrides};
use crate::supervisor;
use crate::units;
use std::io::Write;
use std::path::Path;

/// Runs the study of `config` until its budget is spent or a signal stops it.
pub(super) async fn run(
    config: &Path,
    par: Option<usize>,
    log_format: LogFormat,
) -> Result<(), CliError> {
    let config = Config::load_with(config, &Overrides { max_par: par })?;
    let display = wants_display(log_format).then(crate::progress::Display::new);
    init_logging(log_format, display.as_ref().map(|d| d.log_writer()));
    if let Some(w) = &config.storage.warning {
        tracing::warn!("{w}");
    }
    let control = supervisor::Control {
        par_override: par,
        ..Default::default()
    };
    tokio::spawn(forward_signals(
        control.clone(),
        config.worker.shutdown_grace,
    ));
    let drawn = tokio_util::sync::CancellationToken::new();
    let drawing = display.clone().map(|d| {
        let (rx, c, done) = (control.progress.subscribe(), control.clone(), drawn.clone());
        tokio::spawn(async move { d.run(rx, c.shutdown, c.kill_now, done).await })
    });
    let result = supervisor::run(config, control.clone()).await;
    drawn.cancel();
    if let (Some(d), Some(task)) = (&display, drawing) {
        let _ = task.await;
        d.finish(&control.progress.borrow());
    }
    let summary = result?;
    let c = summary.counts;
    let _ = writeln!(
        std::io::stderr(),
        "sweepd: study {}: {} COMPLETE, {} PRUNED, {} FAIL, {} WAITING",
        if control.kill_now.is_cancelled() {
            "stopped at once by a second signal".to_owned()
        } else if summary.interrupted {
            "stopped by signal".to_owned()
        } else if let Some(by) = &summary.steered {
            format!("{by}, `sweepd resume` to run it again")
        } else {
            "done".to_owned()
        },
        c.complete,
        c.pruned,
        c.fail,
        c.waiting
    );
    Ok(())
}

/// SIGINT and SIGTERM both mean: stop starting trials and wind down within the grace period.
/// A second one (either) means: stop now, SIGKILL the workers' groups, record their trials
/// as interrupted and re-enqueue them. SIGHUP means: re-read the config file.
async fn forward_signals(control: supervisor::Control, grace: std::time::Duration) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) else {
        return;
    };
    let first = loop {
        tokio::select! {
            _ = int.recv() => break "SIGINT",
            _ = term.recv() => break "SIGTERM",
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                control.reload.notify_one();
            }
        }
    };
    // Said on every SIGINT, not only at a terminal: whoever sent it may want to send another.
    let again = if first == "SIGINT" {
        "press Ctrl-C again to stop now"
    } else {
        "a second SIGTERM or SIGINT stops now"
    };
    tracing::info!(
        "{first}: stopping; running trials get shutdown_grace ({}) to finish; {again}",
        units::format_duration(grace)
    );
    control.shutdown.cancel();
    let second = tokio::select! {
        _ = int.recv() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    };
    tracing::warn!(
        "{second} again: stopping now; killing the workers' process groups, their trials are \
         re-enqueued"
    );
    control.kill_now.cancel();
}
