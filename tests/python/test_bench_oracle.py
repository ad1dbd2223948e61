"""The packing bench's oracle (`oracle` in bench/benchlib.py): the list scheduling every figure of
docs/benchmarks.md's packing table is a fraction of, and the learner bound beside it.

Hand-scheduled cases, so that a change to the scheduler that moves the bench's figures shows here
first: a makespan is the end of the last trial, in the cases' own time units."""

import math
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import benchlib  # noqa: E402


def span(jobs, capacity, cap_count=8, steps=(), learn=None):
    return benchlib.oracle(jobs, cap_count, capacity, steps, learn)[0]


class ListScheduling(unittest.TestCase):
    def test_every_trial_that_fits_starts_in_list_order(self):
        # 2 + 2 fill the card; the 3 waits for one of them.
        self.assertEqual(span([(2, 1), (2, 1), (3, 1)], 4), 2)

    def test_a_later_trial_passes_one_that_does_not_fit(self):
        # The 1 starts beside the first 3; the second 3 waits for the first to end.
        self.assertEqual(span([(3, 2), (3, 1), (1, 1)], 4), 3)

    def test_no_more_than_cap_count_run_at_once(self):
        self.assertEqual(span([(1, 1)] * 4, 100, cap_count=2), 2)

    def test_a_trial_larger_than_the_card_runs_alone(self):
        self.assertEqual(span([(9, 1), (1, 1)], 4), 2)

    def test_a_capacity_step_within_a_trials_run_keeps_it_waiting(self):
        # From t = 0.5 the card has 2: the second 2 would overlap that and waits.
        self.assertEqual(span([(2, 1), (2, 1)], 4, steps=[(0.5, 2)]), 2)


class Learner(unittest.TestCase):
    """A learner holds each study's first k trials at the prior and knows its later ones only
    once k of that study's trials have ended."""

    def test_later_trials_wait_for_k_of_their_study_to_end(self):
        jobs = [(1, 1)] * 4
        self.assertEqual(span(jobs, 8), 1)
        self.assertEqual(span(jobs, 8, learn=([0, 1, 0, 1], 1, 3)), 2)

    def test_first_trials_are_held_at_the_prior(self):
        # 5 + 5 do not fit on 8: study 1's first trial waits for study 0's, and study 1's
        # second for its first.
        self.assertEqual(span([(1, 1)] * 4, 8, learn=([0, 1, 0, 1], 1, 5)), 3)

    def test_a_first_trial_larger_than_the_prior_is_held_at_its_peak(self):
        # Held at 6, not 3: the other study's first trial (3) does not fit beside it.
        self.assertEqual(span([(6, 1), (1, 1)], 8, learn=([0, 1], 1, 3)), 2)
        self.assertEqual(span([(4, 1), (1, 1)], 8, learn=([0, 1], 1, 3)), 1)

    def test_a_study_with_no_more_than_k_trials_never_waits(self):
        self.assertEqual(span([(1, 1), (1, 1)], 8, learn=([0, 1], 3, 2)), 1)


class LearnerKnownEarly(unittest.TestCase):
    """The learner's two what-ifs (`bench/packing_whatif.py`): the gate opens on fewer first
    trials, and first trials are known, and held at their peak, before they end."""

    def test_a_first_trial_that_settles_frees_the_rest_of_the_prior_and_opens_the_gate(self):
        # Study 0's first trial (peak 1, held at 5) settles at 0.5: from then on it holds 1,
        # and its second trial may start. Without settling that waits for its end at 2.
        jobs = [(1, 2), (6, 1)]
        self.assertEqual(span(jobs, 8, learn=([0, 0], 1, 5, 1, math.inf)), 3)
        self.assertEqual(span(jobs, 8, learn=([0, 0], 1, 5, 1, 0.5)), 2)

    def test_the_gate_may_open_on_fewer_first_trials_than_are_held_at_the_prior(self):
        # Two first trials at the prior 4 (ending at 1 and 3); the third waits for one (known
        # 1) or both (known 2, as with k alone) to end.
        jobs = [(1, 1), (1, 3), (1, 1)]
        self.assertEqual(span(jobs, 8, learn=([0, 0, 0], 2, 4, 1)), 3)
        self.assertEqual(span(jobs, 8, learn=([0, 0, 0], 2, 4, 2)), 4)
        self.assertEqual(span(jobs, 8, learn=([0, 0, 0], 2, 4)), 4)

    def test_a_first_trial_is_counted_at_its_peak_from_when_it_is_known_on(self):
        # The card drops from 10 to 7 at t = 1. Study 0's first trial (peak 2, held at 5 until
        # known, 3 s) and study 1's (peak 3, held at 5, 2 s) fit together at t = 0 (5 + 5 = 10),
        # and at t = 1 only if study 0's is known by then (2 + 5 = 7). Known at 0.5, both start
        # at once; known only at its end, the second waits for the first to end at 3.
        jobs = [(2, 3), (3, 2)]
        self.assertEqual(span(jobs, 10, steps=[(1, 7)], learn=([0, 1], 1, 5, 1, 0.5)), 3)
        self.assertEqual(span(jobs, 10, steps=[(1, 7)], learn=([0, 1], 1, 5, 1, math.inf)), 5)


if __name__ == "__main__":
    unittest.main()


def caps(jobs, capacity, first=(), prior=0, ramp=0.0, cap_count=8, steps=()):
    return benchlib.caps_bound(jobs, cap_count, capacity, steps, first, prior, ramp)


class CapsBound(unittest.TestCase):
    """Issue 41's design at its best: a study's first trials start at a small prior, one above
    it fails at its cap after the part of its ramp that reaches the prior and is re-run at its
    true peak; every other peak is known."""

    def test_with_no_first_trials_it_is_the_oracle(self):
        for jobs, capacity in (([(2, 1), (2, 1), (3, 1)], 4), ([(3, 2), (3, 1), (1, 1)], 4),
                               ([(9, 1), (1, 1)], 4)):
            self.assertEqual(caps(jobs, capacity), (span(jobs, capacity), 0.0))

    def test_a_first_trial_within_the_prior_runs_once_at_its_peak(self):
        # Held at 1, not at the prior 3: the 3 beside it fits on 4.
        self.assertEqual(caps([(1, 1), (3, 1)], 4, first=[0], prior=3, ramp=1.0), (1.0, 0.0))

    def test_a_first_trial_above_the_prior_loses_its_ramp_to_it_and_is_re_run(self):
        # The 4 holds 2 for a quarter of its ramp of 1 (2/4 x 0.5 s = 0.25 s), beside the 1
        # (2 + 1 <= 4); its re-run at 4 waits for the 1 to end at 1, and ends at 3.
        self.assertEqual(caps([(4, 2), (1, 1)], 4, first=[0], prior=2, ramp=0.5), (3.0, 0.25))

    def test_a_re_run_goes_before_every_later_trial(self):
        # Two at once: the capped attempt (0-0.5) and trial 1 (0-2) run; at 0.5 the re-run
        # takes the free place before trial 2 (listed after it), which starts at 1.5 and ends
        # at 4.5 (trial 2 first would have ended at 3.5).
        self.assertEqual(caps([(4, 1), (1, 2), (1, 3)], 8, first=[0], prior=2, ramp=1.0,
                              cap_count=2), (4.5, 0.5))

    def test_an_attempt_of_no_length_is_re_run_at_once(self):
        self.assertEqual(caps([(4, 1), (1, 1)], 8, first=[0], prior=2, ramp=0.0), (1.0, 0.0))

    def test_a_capped_attempt_is_never_longer_than_the_trial(self):
        # A ramp longer than the trial (a short trial from the same settings): the attempt ends
        # with the trial's own 1 s, not 2 x 2/4.
        self.assertEqual(caps([(4, 1)], 8, first=[0], prior=2, ramp=4.0), (2.0, 1.0))

    def test_first_trials_are_each_studys_first_k(self):
        self.assertEqual(benchlib.first_trials([0, 1, 0, 1, 0, 1], 2), [0, 1, 2, 3])
        self.assertEqual(benchlib.first_trials([0, 0, 0], 0), [])


class MergeAttempts(unittest.TestCase):
    """The oracle's jobs from several runs of the same trials: a trial's completed attempt,
    whether it completed in another run or as a re-run under another number in the same run."""

    def test_a_capped_trial_takes_its_re_runs_figures(self):
        records = {0: (1, 1.0, True), 1: (8, 2.0, False), 2: (5, 0.1, False), 3: (5, 3.0, True)}
        # 2 is a copy of 1 (it failed too), 3 a copy of 1 that completed.
        self.assertEqual(benchlib.merge_attempts([(records, {2: 1, 3: 1})]),
                         {0: (1, 1.0), 1: (5, 3.0)})

    def test_a_chain_of_copies_leads_to_the_first_attempt(self):
        records = {0: (6, 0.2, False), 5: (6, 0.3, False), 9: (6, 2.0, True)}
        self.assertEqual(benchlib.merge_attempts([(records, {5: 0, 9: 5})]), {0: (6, 2.0)})

    def test_a_completed_attempt_of_another_run_wins_over_a_failed_one(self):
        failed = ({0: (9, 0.5, False)}, {})
        done = ({0: (7, 2.5, True)}, {})
        self.assertEqual(benchlib.merge_attempts([failed, done]), {0: (7, 2.5)})
        self.assertEqual(benchlib.merge_attempts([done, failed]), {0: (7, 2.5)})

    def test_a_trial_that_never_completed_counts_as_drawn(self):
        self.assertEqual(benchlib.merge_attempts([({0: (9, 0.5, False)}, {})]), {0: (9, 0.5)})


class BeyondWorkload(unittest.TestCase):
    """The packing bench's `beyond` trials: the first third take only the small sizes, so that
    the later trials' memory lies beyond what the first ones measured."""

    def test_the_first_third_draw_only_the_early_choices_and_the_rest_all(self):
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
        import gpu_bench
        import tomllib

        space = tomllib.loads(gpu_bench.BEYOND_PARAMS)["params"]
        trials = gpu_bench.drawn_params(space, 40, 7, gpu_bench.BEYOND_EARLY)
        self.assertEqual({t["b"] for t in trials[:13]} - {16, 32}, set())
        self.assertEqual({t["b"] for t in trials[13:]}, {16, 32, 64, 128, 256})
        # The same seed, the same trials: every run of the workload runs them.
        self.assertEqual(gpu_bench.drawn_params(space, 40, 7, gpu_bench.BEYOND_EARLY), trials)
