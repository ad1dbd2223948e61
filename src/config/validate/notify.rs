//! `[notify]`: the command run on events, which events, how often a summary, and how long one
//! run may take.

use super::super::raw::RawNotify;
use super::super::{NotifyConfig, NotifyEvent};
use super::worker::check_exec_string;
use super::{Validator, YEAR};
use std::time::Duration;

/// The longest one run of the notify command may take before it is killed.
pub(crate) const MAX_NOTIFY_TIMEOUT: Duration = Duration::from_secs(600);
/// The least `summary_every`: a summary more often than this is noise, not news.
pub(crate) const MIN_SUMMARY_EVERY: Duration = Duration::from_secs(60);

impl Validator<'_> {
    pub(crate) fn notify(&mut self, raw: Option<&RawNotify>) -> NotifyConfig {
        let d = NotifyConfig::default();
        let Some(raw) = raw else {
            return d;
        };
        let command = match &raw.command {
            None => {
                self.missing("notify.command");
                Vec::new()
            }
            Some(c) => self.notify_command(c),
        };
        let summary_every = self
            .duration(raw.summary_every.as_ref(), "notify.summary_every", YEAR)
            .filter(|every| {
                let ok = *every >= MIN_SUMMARY_EVERY;
                if !ok {
                    let at = raw.summary_every.as_ref().expect("parsed from it");
                    self.at(at, "notify.summary_every", "must be at least 1m");
                }
                ok
            });
        let timeout = self
            .duration(raw.timeout.as_ref(), "notify.timeout", MAX_NOTIFY_TIMEOUT)
            .unwrap_or(d.timeout);
        let events = match &raw.events {
            None => NotifyEvent::ALL
                .into_iter()
                .filter(|e| *e != NotifyEvent::Summary || summary_every.is_some())
                .collect(),
            Some(list) => self.notify_events(list, summary_every.is_some()),
        };
        if let (Some(every), false) = (&raw.summary_every, events.contains(&NotifyEvent::Summary)) {
            if raw.events.is_some() {
                self.at(
                    every,
                    "notify.summary_every",
                    "is set, but `events` leaves out \"summary\": add it, or remove \
                     summary_every",
                );
            }
        }
        NotifyConfig {
            command,
            events,
            summary_every,
            timeout,
        }
    }

    /// The command's argv: a program and its arguments, no shell.
    fn notify_command(&mut self, raw: &toml::Spanned<Vec<toml::Spanned<String>>>) -> Vec<String> {
        const KEY: &str = "notify.command";
        match raw.get_ref().first() {
            None => self.at(
                raw,
                KEY,
                "must not be empty: give the program and its arguments, e.g. [\"curl\", \
                 \"-fsS\", \"--data-binary\", \"@-\", \"https://hooks.example.com/…\"] (no shell; \
                 write [\"sh\", \"-c\", \"…\"] for one)",
            ),
            Some(first) if first.get_ref().is_empty() => {
                self.at(first, KEY, "the program (first element) is empty")
            }
            Some(_) => {}
        }
        for arg in raw.get_ref() {
            if arg.get_ref().contains('\0') {
                self.at(arg, KEY, "arguments may not contain NUL bytes");
            } else if let Err(message) = check_exec_string(arg.get_ref()) {
                self.at(arg, KEY, format!("an argument {message}"));
            }
        }
        raw.get_ref().iter().map(|a| a.get_ref().clone()).collect()
    }

    /// `events`: names of [`NotifyEvent`], each once; in [`NotifyEvent::ALL`]'s order.
    fn notify_events(
        &mut self,
        list: &toml::Spanned<Vec<toml::Spanned<String>>>,
        summaries: bool,
    ) -> Vec<NotifyEvent> {
        let names = NotifyEvent::ALL
            .iter()
            .map(|e| format!("\"{e}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let mut out = Vec::new();
        for (i, name) in list.get_ref().iter().enumerate() {
            let key = format!("notify.events[{i}]");
            match NotifyEvent::ALL
                .iter()
                .find(|e| e.as_str() == name.get_ref())
            {
                None => self.at(
                    name,
                    &key,
                    format!(
                        "unknown event {:?}; expected one of {names}",
                        name.get_ref()
                    ),
                ),
                Some(e) if out.contains(e) => {
                    self.at(name, &key, format!("\"{e}\" is named twice"))
                }
                Some(NotifyEvent::Summary) if !summaries => self.at(
                    name,
                    &key,
                    "\"summary\" needs `summary_every`, how often to send one (e.g. \"6h\")",
                ),
                Some(e) => out.push(*e),
            }
        }
        out.sort();
        out
    }
}
