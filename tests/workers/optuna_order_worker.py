#!/usr/bin/env python3
"""A worker ported from an Optuna script that kept Optuna's `report(value, step)`.

Every trial fails in the same place with the helper's TypeError about the
argument order: a study that can only fail.
"""

import os
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import sweepd_worker  # noqa: E402


def objective(trial):
    loss = 0.0
    for epoch in range(3):
        loss = (trial.params["x"] - 0.3) ** 2 + 1.0 / (epoch + 1)
        trial.report(loss, epoch)  # Optuna's order
    return loss


if __name__ == "__main__":
    sweepd_worker.serve(objective)
