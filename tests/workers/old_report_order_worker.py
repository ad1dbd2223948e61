#!/usr/bin/env python3
"""A worker that kept sweepd's old argument order `report(step, value)`.

The helper follows Optuna's `report(value, step)` and refuses it with a TypeError
on line 20 every time (tests/trust.rs checks that): a study that can only fail.
"""

import os
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import sweepd_worker  # noqa: E402


def objective(trial):
    loss = 0.0
    for epoch in range(3):
        loss = (trial.params["x"] - 0.3) ** 2 + 1.0 / (epoch + 1)
        trial.report(epoch, loss)  # the old order: refused
    return loss


if __name__ == "__main__":
    sweepd_worker.serve(objective)
