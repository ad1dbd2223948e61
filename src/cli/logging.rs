//! Where `sweepd run`'s log lines go: plain text or JSON lines on stderr, with syslog priorities
//! for journald, or through the live progress display at a terminal.

use super::args::LogFormat;

/// Whether `sweepd run` draws the live progress display: for a person, i.e. stderr is a
/// terminal, not the journal, and text logs (who asks for JSON lines wants lines only).
pub(super) fn wants_display(format: LogFormat) -> bool {
    use std::io::IsTerminal;
    format == LogFormat::Text
        && std::io::stderr().is_terminal()
        && std::env::var_os("JOURNAL_STREAM").is_none()
}

/// Logs to stderr: plain text without colours unless stderr is a terminal (journald shows
/// escape codes verbatim), or one JSON object per line. With the progress display up, every
/// line goes through it (`display`), so that lines appear above it and never tear it.
pub(super) fn init_logging(format: LogFormat, display: Option<crate::progress::LogWriter>) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("SWEEPD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
        // PostgreSQL's notices ("relation … already exists, skipping" from the idempotent
        // migrations at every start) are the server's chatter, not the study's.
        .add_directive(
            "sqlx::postgres::notice=warn"
                .parse()
                .expect("a valid directive"),
        );
    if let Some(writer) = display {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .with_ansi(true)
            .try_init();
        return;
    }
    // systemd sets JOURNAL_STREAM when stderr is the journal: there each line gets its syslog
    // priority as a `<N>` prefix (which journald strips), and journald adds the timestamp.
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && !journal);
    let _ = match (format, journal) {
        (LogFormat::Text, false) => builder.try_init(),
        (LogFormat::Json, false) => builder.json().try_init(),
        (LogFormat::Text, true) => builder
            .event_format(Journald(tracing_subscriber::fmt::format().without_time()))
            .try_init(),
        (LogFormat::Json, true) => builder
            .event_format(Journald(tracing_subscriber::fmt::format().json()))
            .try_init(),
    };
}

/// Prefixes each log line with its syslog priority for journald (`<3>` error .. `<7>` debug).
struct Journald<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for Journald<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let priority = match *event.metadata().level() {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        write!(writer, "<{priority}>")?;
        self.0.format_event(ctx, writer, event)
    }
}
