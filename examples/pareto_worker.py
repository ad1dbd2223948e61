#!/usr/bin/env python3
"""Example of a study with two objectives: a model's validation loss against its latency.

Search space (declared in examples/pareto.toml):

    width      int in [16, 512], log scale    wider: lower loss, slower
    depth      int in [1, 8]                  deeper: lower loss, slower
    dropout    float in [0, 0.5]
    precision  categorical: "fp32", "fp16", "int8"   lower precision: faster, a bit worse

The objective returns (val_loss, latency_ms): no setting is best at both, so the result is
a Pareto front of trade-offs (`sweepd best`), as Optuna's `study.best_trials`.
"""

import math
import os
import sys

# sweepd puts the python/ directory on PYTHONPATH; this fallback lets the
# example also find the helper when run from a checkout by other means.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import sweepd_worker  # noqa: E402

PRECISION = {"fp32": (1.0, 0.0), "fp16": (0.55, 0.01), "int8": (0.3, 0.04)}


def objective(trial):
    width = trial.suggest_int("width", 16, 512, log=True)
    depth = trial.suggest_int("depth", 1, 8)
    dropout = trial.suggest_float("dropout", 0.0, 0.5)
    precision = trial.suggest_categorical("precision", ["fp32", "fp16", "int8"])
    speed, loss_penalty = PRECISION[precision]
    capacity = math.log2(width) * math.sqrt(depth)
    val_loss = 2.0 / (1.0 + capacity) + 0.3 * (dropout - 0.2) ** 2 + loss_penalty
    latency_ms = speed * (0.02 * width * depth + 1.0)
    return val_loss, latency_ms


if __name__ == "__main__":
    sweepd_worker.serve(objective)
