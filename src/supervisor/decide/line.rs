//! The admission line: candidates chosen but not yet admitted, kept until a device has room so
//! that a large trial is not dropped in favour of small ones (at most `policy::MAX_QUEUE`),
//! each with how many trials started ahead of it.

use crate::sampler::Proposal;
use crate::store::Waiting;
use crate::study::Params;
use std::collections::VecDeque;

/// A trial chosen but not yet admitted.
pub(in crate::supervisor) enum Candidate {
    /// A WAITING trial (a retry copy, `study.enqueue_trial`), with what the sampler proposes
    /// for the params it leaves open.
    Waiting(Box<Waiting>, Proposal),
    New(Proposal),
}

impl Candidate {
    /// The params it starts with (the static space's): what admission sees of it.
    pub(in crate::supervisor) fn params(&self) -> &Params {
        match self {
            Candidate::Waiting(_, p) | Candidate::New(p) => &p.params,
        }
    }

    /// Whether it is an enqueued (WAITING) trial, which holds a start of the budget.
    pub(in crate::supervisor) fn is_waiting(&self) -> bool {
        matches!(self, Candidate::Waiting(..))
    }
}

/// The candidates in line, head first, each with how many trials started ahead of it.
#[derive(Default)]
pub(in crate::supervisor) struct Line {
    queue: VecDeque<(Candidate, u32)>,
    /// A new trial's start was refused for a WAITING trial outside the line
    /// (`Started::Waiting`): the next decision looks for it and puts it at the head.
    waiting_first: bool,
}

impl Line {
    pub(in crate::supervisor) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(in crate::supervisor) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The head of the line.
    pub(in crate::supervisor) fn head(&self) -> Option<&Candidate> {
        self.queue.front().map(|(c, _)| c)
    }

    /// How many trials of this line started ahead of the head.
    pub(in crate::supervisor) fn head_passed(&self) -> u32 {
        self.queue.front().map_or(0, |(_, n)| *n)
    }

    /// The candidates, head first.
    pub(in crate::supervisor) fn candidates(&self) -> impl Iterator<Item = &Candidate> {
        self.queue.iter().map(|(c, _)| c)
    }

    pub(in crate::supervisor) fn push_back(&mut self, c: Candidate) {
        self.queue.push_back((c, 0));
    }

    /// A WAITING trial that must go first.
    pub(in crate::supervisor) fn push_front(&mut self, c: Candidate) {
        self.queue.push_front((c, 0));
    }

    /// The candidate at `k` leaves the line to start; one behind the head passes it.
    pub(in crate::supervisor) fn take(&mut self, k: usize) -> Candidate {
        let (c, _) = self.queue.remove(k).expect("a place in line");
        if k > 0 {
            if let Some((_, passed)) = self.queue.front_mut() {
                *passed += 1;
            }
        }
        c
    }

    /// A candidate whose start the store refused (no room after all, or a WAITING trial must
    /// go first) goes back where it stood.
    pub(in crate::supervisor) fn put_back(&mut self, k: usize, c: Candidate) {
        let k = k.min(self.queue.len());
        self.queue.insert(k, (c, 0));
    }

    /// The budget has no start left for new trials: only WAITING ones stay.
    pub(in crate::supervisor) fn drop_new(&mut self) {
        self.queue.retain(|(c, _)| c.is_waiting());
    }

    /// A WAITING trial outside the line must go first (the store said so).
    pub(in crate::supervisor) fn waiting_outside(&mut self) {
        self.waiting_first = true;
    }

    /// Whether to look for that trial now (once).
    pub(in crate::supervisor) fn take_waiting_first(&mut self) -> bool {
        std::mem::take(&mut self.waiting_first)
    }

    /// The WAITING trials in line, by trial_id: a start neither looks for them again nor
    /// waits for them (`StartCtx::skip_waiting`).
    pub(in crate::supervisor) fn queued_waiting(&self) -> Vec<i64> {
        self.queue
            .iter()
            .filter_map(|(c, _)| match c {
                Candidate::Waiting(w, _) => Some(w.trial_id),
                Candidate::New(_) => None,
            })
            .collect()
    }

    /// New samples in line: not numbered yet, each gets its own seed key.
    pub(in crate::supervisor) fn queued_new(&self) -> u64 {
        self.queue.iter().filter(|(c, _)| !c.is_waiting()).count() as u64
    }
}

#[cfg(test)]
pub(in crate::supervisor) mod tests {
    use super::*;
    use crate::study::ParamValue;

    /// A new candidate whose one param `x` is `x`.
    pub(in crate::supervisor) fn new(x: i64) -> Candidate {
        Candidate::New(Proposal {
            params: [("x".to_owned(), ParamValue::Int(x))].into_iter().collect(),
            relative: Default::default(),
        })
    }

    /// An enqueued candidate with trial_id `id` whose one param `x` is `x`.
    pub(in crate::supervisor) fn waiting(id: i64, x: i64) -> Candidate {
        let Candidate::New(p) = new(x) else {
            unreachable!()
        };
        let mut w = Waiting::default();
        (w.trial_id, w.number) = (id, id);
        Candidate::Waiting(Box::new(w), p)
    }

    fn xs(line: &Line) -> Vec<i64> {
        line.candidates()
            .map(|c| match c.params()["x"] {
                ParamValue::Int(x) => x,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn a_start_behind_the_head_passes_it_and_a_refused_one_goes_back_where_it_stood() {
        let mut line = Line::default();
        for x in 1..=3 {
            line.push_back(new(x));
        }
        line.take(2);
        assert_eq!(line.head_passed(), 1);
        line.take(1);
        assert_eq!(line.head_passed(), 2);
        // The head itself starting passes no one.
        line.push_back(new(4));
        let head = line.take(0);
        assert_eq!(line.head_passed(), 0, "a new head starts at 0");
        line.put_back(0, head);
        assert_eq!(xs(&line), [1, 4]);
        line.put_back(9, new(5));
        assert_eq!(xs(&line), [1, 4, 5], "past the end: at the end");
    }

    #[test]
    fn without_starts_for_new_trials_only_the_enqueued_stay_in_line() {
        let mut line = Line::default();
        line.push_back(new(1));
        line.push_back(waiting(7, 2));
        line.push_back(new(3));
        line.push_front(waiting(9, 4));
        assert_eq!(line.queued_waiting(), [9, 7]);
        assert_eq!(line.queued_new(), 2);
        line.drop_new();
        assert_eq!(xs(&line), [4, 2]);
        assert!(!line.take_waiting_first());
        line.waiting_outside();
        assert!(line.take_waiting_first());
        assert!(!line.take_waiting_first(), "once");
    }
}
