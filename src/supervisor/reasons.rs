//! Why each candidate in the `Core`'s line waits, as the daemon publishes it for `status` and
//! `trials` (`study::reason::Line`, built by `Core::waiting_line` from the line, the slots and
//! the breaker, stored by `Store::publish_line` when a phrase changes). Pure: the
//! head waits for a slot or for GPU memory (its expected peak against the most free on any
//! device, from the readings the housekeeping tick just wrote), the others for those ahead of
//! them; the breaker, when it holds every device, holds the whole study.

use crate::store::GpuRow;
use crate::study::reason::{Line, Queued, Reason};

/// The line for candidates `ids` (head first; `None`: a new sample not numbered yet), every
/// slot busy (`busy`: running, max_par) or not, this tick's GPU rows, and the breaker's hold
/// until a local time.
pub(super) fn line_of(
    ids: &[Option<i64>],
    busy: Option<(usize, usize)>,
    rows: &[GpuRow],
    held: Option<String>,
) -> Line {
    let head = match busy {
        Some((running, max_par)) => Some(Reason::Slots { running, max_par }),
        None => rows
            .iter()
            .filter(|r| r.error.is_none())
            .filter_map(|r| Some((r.free?, r.expected_peak?, r.device)))
            .max_by_key(|(free, _, device)| (*free, std::cmp::Reverse(*device)))
            .map(|(free, expects, device)| Reason::Memory {
                expects,
                free,
                device,
            }),
    };
    let queued = ids
        .iter()
        .enumerate()
        .filter_map(|(k, id)| {
            let reason = match k {
                0 => head.clone()?,
                ahead => Reason::Queued { ahead },
            };
            Some(Queued {
                trial_id: *id,
                reason,
            })
        })
        .collect();
    Line {
        study: held.map(|until| Reason::Breaker { until }),
        queued,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn row(device: u32, free_gib: u64, error: bool) -> GpuRow {
        GpuRow {
            device,
            free: Some(free_gib * GIB),
            expected_peak: Some(7 * GIB),
            error: error.then(|| "GPU is lost".to_owned()),
            ..GpuRow::default()
        }
    }

    fn phrases(line: &Line) -> Vec<(Option<i64>, String)> {
        line.queued
            .iter()
            .map(|q| (q.trial_id, q.reason.phrase()))
            .collect()
    }

    #[test]
    fn the_head_waits_for_the_device_with_the_most_room_and_the_rest_for_those_ahead() {
        // GPU 1 has the most room; GPU 2 cannot be read and does not count.
        let rows = [row(0, 2, false), row(1, 5, false), row(2, 40, true)];
        let line = line_of(&[None, Some(12), Some(14)], None, &rows, None);
        assert_eq!(
            phrases(&line),
            [
                (
                    None,
                    "waiting: expects 7.0 GiB, 5.0 GiB free on GPU 1".to_owned()
                ),
                (Some(12), "waiting: 1 candidate ahead in line".to_owned()),
                (Some(14), "waiting: 2 candidates ahead in line".to_owned()),
            ]
        );
        assert_eq!(line.study, None);
    }

    #[test]
    fn busy_slots_and_the_breaker_say_so_and_no_gpu_says_nothing_of_memory() {
        let line = line_of(
            &[Some(3)],
            Some((4, 4)),
            &[row(0, 1, false)],
            Some("2026-03-01 14:05:00".into()),
        );
        assert_eq!(
            phrases(&line),
            [(Some(3), "waiting: all slots busy (4/4 running)".to_owned())]
        );
        assert_eq!(
            Reason::phrases(&line.reasons_of(3)),
            "held by the breaker until 14:05; waiting: all slots busy (4/4 running)"
        );
        // On CPUs with a free slot a candidate does not wait for memory.
        assert!(line_of(&[Some(3)], None, &[], None).queued.is_empty());
    }
}
