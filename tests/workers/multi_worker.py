#!/usr/bin/env python3
"""A worker for studies with several objectives: returns (loss, accuracy) from the params,
a ZDT-like trade-off in `x` with the other params adding to the loss.

SWEEPD_TEST_SLEEP: seconds each trial takes (default 0).
SWEEPD_TEST_MULTI picks what some trials do instead, as `NUMBER:WHAT,...`:
  inf      the loss is +inf and the accuracy -inf (stored as Optuna stores infinities)
  count    three values for two objectives (bad_value)
  nan      NaN as the accuracy (bad_value)
  text     a value that is not a number (bad_value)
  report   calls trial.report, which a study with several objectives refuses
SWEEPD_TEST_OPEN / SWEEPD_TEST_GATE: files each trial creates / waits for first (gate.py).
"""

import math
import os
import time

import gate
import sweepd_worker


def plan():
    out = {}
    for item in os.environ.get("SWEEPD_TEST_MULTI", "").split(","):
        if item:
            number, what = item.split(":")
            out[int(number)] = what
    return out


def objective(trial):
    x = trial.suggest_float("x", -2.0, 2.0)
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    n = trial.suggest_int("n", 0, 10, step=2)
    opt = trial.suggest_categorical("opt", ["adam", "sgd", "rmsprop"])
    what = plan().get(trial.number)
    gate.pass_gate()
    time.sleep(float(os.environ.get("SWEEPD_TEST_SLEEP", "0")))
    if what == "report":
        trial.report(1.0, 0)
    t = (x + 2.0) / 4.0
    g = 1.0 + abs(math.log10(lr) + 3.0) / 4.0 + n / 20.0 + (0.0 if opt == "adam" else 0.3)
    loss, accuracy = t, 1.0 - g * (1.0 - math.sqrt(t / g))
    if what == "inf":
        return float("inf"), float("-inf")
    if what == "count":
        return loss, accuracy, 0.0
    if what == "nan":
        return loss, float("nan")
    if what == "text":
        return loss, "high"
    return loss, accuracy


if __name__ == "__main__":
    sweepd_worker.serve(objective)
