//! What the daemon tells a person through `[notify]` (`crate::notify`): when a GPU stops
//! answering, when the breaker holds every device, a summary every `summary_every`
//! (`Watch`, asked on each housekeeping tick: the pure part says which events a tick's
//! readings are news of), and at the end why the study finished or the error it stopped on
//! (`at_end`). Sending never waits: the notifier queues.

use super::error::RunError;
use super::shared::Shared;
use crate::notify::{Event, Summary, SummaryClock};
use crate::store::GpuRow;
use std::collections::BTreeSet;
use std::time::Instant;

/// What the last ticks showed, so that each event is sent when it starts, not on every tick.
pub(super) struct Watch {
    lost: BTreeSet<u32>,
    held: bool,
    clock: SummaryClock,
}

/// What one tick saw: each GPU's reading error (`None`: it answered), the breaker's hold.
pub(super) struct Seen<'a> {
    pub(super) errors: Vec<(u32, Option<&'a str>)>,
    pub(super) held: Option<&'a str>,
}

impl Watch {
    pub(super) fn new(sh: &Shared, now: Instant) -> Watch {
        Watch {
            lost: BTreeSet::new(),
            held: false,
            clock: SummaryClock::new(sh.cfg().notify.summary_every, now),
        }
    }

    /// The events `seen` is news of: a device whose readings started failing (once until it
    /// answers again), the breaker starting to hold the study; and whether a summary is due.
    pub(super) fn news(&mut self, seen: &Seen<'_>, now: Instant) -> (Vec<Event>, bool) {
        let mut out = Vec::new();
        for (device, error) in &seen.errors {
            match error {
                Some(e) if self.lost.insert(*device) => out.push(Event::device_lost(*device, e)),
                Some(_) => {}
                None => {
                    self.lost.remove(device);
                }
            }
        }
        match seen.held {
            Some(why) if !self.held => out.push(Event::breaker(why)),
            _ => {}
        }
        self.held = seen.held.is_some();
        (out, self.clock.due(now))
    }

    /// Sends what this tick is news of; `summary`: where the study stands now.
    pub(super) fn tick(
        &mut self,
        sh: &Shared,
        summary: Summary,
        rows: &[GpuRow],
        held: Option<&str>,
    ) {
        let seen = Seen {
            errors: rows
                .iter()
                .map(|r| (r.device, r.error.as_deref()))
                .collect(),
            held,
        };
        let (events, due) = self.news(&seen, Instant::now());
        for e in events {
            sh.notifier.send(e);
        }
        if due {
            sh.notifier.send(Event::summary(&summary));
        }
    }
}

/// The end of the run: a `fatal` event for `error`, else a `finished` one unless a signal
/// stopped the daemon (a person did that, and knows); then the queued events' last chance.
pub(super) async fn at_end(sh: &Shared, error: Option<&RunError>, interrupted: bool) {
    if let Some(e) = error {
        sh.notifier.send(Event::fatal(&e.to_string()));
    } else if !interrupted {
        let core = sh.core.lock().await;
        let why = match core.ended() {
            Some(e) => e.to_string(),
            None if core.exhausted() => "study done: every point of the grid was tried".to_owned(),
            None => "study done".to_owned(),
        };
        sh.notifier.send(Event::finished(&why, &core.summary()));
    }
    sh.notifier.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NotifyEvent;
    use std::time::Duration;

    fn watch() -> Watch {
        Watch {
            lost: BTreeSet::new(),
            held: false,
            clock: SummaryClock::new(Some(Duration::from_secs(3600)), Instant::now()),
        }
    }

    fn kinds(events: &[Event]) -> Vec<(NotifyEvent, Option<u64>)> {
        events
            .iter()
            .map(|e| (e.kind, e.fields.get("device").and_then(|d| d.as_u64())))
            .collect()
    }

    #[test]
    fn a_lost_device_and_the_breaker_are_news_once_until_they_clear() {
        let mut w = watch();
        let now = Instant::now();
        let tick = |w: &mut Watch, errors: Vec<(u32, Option<&str>)>, held| {
            kinds(&w.news(&Seen { errors, held }, now).0)
        };
        assert_eq!(tick(&mut w, vec![(0, None), (1, None)], None), []);
        assert_eq!(
            tick(&mut w, vec![(0, None), (1, Some("GPU is lost"))], None),
            [(NotifyEvent::DeviceLost, Some(1))]
        );
        assert_eq!(
            tick(&mut w, vec![(0, None), (1, Some("GPU is lost"))], None),
            [],
            "still lost: said once"
        );
        assert_eq!(
            tick(
                &mut w,
                vec![(0, None), (1, None)],
                Some("every device quarantined")
            ),
            [(NotifyEvent::Breaker, None)]
        );
        assert_eq!(tick(&mut w, vec![], Some("still")), [], "still held");
        assert_eq!(
            tick(&mut w, vec![(1, Some("lost again"))], None),
            [(NotifyEvent::DeviceLost, Some(1))]
        );
        assert_eq!(
            tick(&mut w, vec![], Some("held again")),
            [(NotifyEvent::Breaker, None)]
        );
    }
}
