"""Ordering between test processes through files, for the test workers.

SWEEPD_TEST_OPEN=PATH  every trial creates PATH as it starts
SWEEPD_TEST_GATE=PATH  every trial waits until PATH exists, then runs

A test that needs two daemons to both run trials gives one daemon's workers the
gate and the other's the opener: the first cannot finish a trial before the
second has started one, however the machine schedules their start-ups.
"""

import os
import time


def pass_gate():
    opener = os.environ.get("SWEEPD_TEST_OPEN")
    if opener:
        open(opener, "a").close()
    gate = os.environ.get("SWEEPD_TEST_GATE")
    while gate and not os.path.exists(gate):
        time.sleep(0.02)
