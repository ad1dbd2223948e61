"""The packing bench's oracle (bench/gpu_bench.py): the list scheduling every figure of
docs/benchmarks.md's packing table is a fraction of, and the learner bound beside it.

Hand-scheduled cases, so that a change to the scheduler that moves the bench's figures shows here
first: a makespan is the end of the last trial, in the cases' own time units."""

import math
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import gpu_bench  # noqa: E402
import packing_whatif  # noqa: E402


def span(jobs, capacity, cap_count=8, steps=(), learn=None):
    return gpu_bench.oracle(jobs, cap_count, capacity, steps, learn)[0]


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


class WhatIfLearner(unittest.TestCase):
    """`bench/packing_whatif.py`'s learner, which adds to the oracle's a gate on fewer first
    trials and first trials that settle before they end."""

    def test_without_its_changes_it_is_the_oracles_learner(self):
        rng = random.Random(3)
        for _ in range(200):
            n = rng.randint(1, 12)
            jobs = [(rng.randint(1, 9), rng.choice([0.5, 1, 1.5, 2])) for _ in range(n)]
            studies = [rng.randint(0, 1) for _ in range(n)]
            k, prior, cap = rng.randint(0, 3), rng.randint(0, 8), rng.randint(1, 8)
            want = span(jobs, 10, cap, learn=(studies, k, prior))
            got = packing_whatif.learner(jobs, studies, k, k, prior, math.inf, cap, 10)
            self.assertEqual(got, want, (jobs, studies, k, prior, cap))

    def test_a_first_trial_that_settles_frees_the_rest_of_the_prior_and_opens_the_gate(self):
        # Study 0's first trial (peak 1, held at 5) settles at 0.5: from then on it holds 1,
        # and its second trial may start. Without settling that waits for its end at 2.
        jobs = [(1, 2), (6, 1)]
        self.assertEqual(packing_whatif.learner(jobs, [0, 0], 1, 1, 5, math.inf, 8, 8), 3)
        self.assertEqual(packing_whatif.learner(jobs, [0, 0], 1, 1, 5, 0.5, 8, 8), 2)

    def test_the_gate_may_open_on_fewer_first_trials_than_are_held_at_the_prior(self):
        # Two first trials at the prior 4 (ending at 1 and 3); the third waits for one (k1 = 1)
        # or both (k1 = 2) to end.
        jobs = [(1, 1), (1, 3), (1, 1)]
        self.assertEqual(packing_whatif.learner(jobs, [0, 0, 0], 2, 1, 4, math.inf, 8, 8), 3)
        self.assertEqual(packing_whatif.learner(jobs, [0, 0, 0], 2, 2, 4, math.inf, 8, 8), 4)


if __name__ == "__main__":
    unittest.main()
