#!/usr/bin/env python3
"""Bundled sweepd example: a noisy quadratic, served in persistent mode.

Search space (declare it in the study config):

    x          float in [-5, 5]
    y          int in [-4, 8], step 2
    optimizer  categorical: "adam", "sgd", "rmsprop"
    lr         float in [1e-5, 1e-1], log scale

The minimum (about 0) is at x=1.5, y=2, optimizer=adam, lr=1e-3.  Each trial
"trains" for 5 epochs, reporting the loss after each one so that sweepd can
prune unpromising trials, and takes roughly 0.15 s.
"""

import math
import os
import random
import sys
import time

# sweepd puts the python/ directory on PYTHONPATH; this fallback lets the
# example also find the helper when run from a checkout by other means.
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import sweepd_worker  # noqa: E402

EPOCHS = 5
OPTIMIZER_PENALTY = {"adam": 0.0, "sgd": 0.3, "rmsprop": 0.15}


def final_loss(x, y, optimizer, lr):
    """The noiseless objective."""
    return (
        (x - 1.5) ** 2
        + 0.5 * (y - 2) ** 2
        + OPTIMIZER_PENALTY[optimizer]
        + 0.2 * (math.log10(lr) + 3) ** 2
    )


def objective(trial):
    p = trial.params
    x, y, optimizer, lr = float(p["x"]), int(p["y"]), str(p["optimizer"]), float(p["lr"])
    target = final_loss(x, y, optimizer, lr)
    rng = random.Random()
    loss = float("inf")
    for epoch in range(EPOCHS):
        time.sleep(0.03)  # pretend to train
        # The loss starts high and decays towards the target, with a little noise.
        loss = target + 2.0 * 0.25 ** epoch + rng.gauss(0.0, 0.01)
        print("trial %d epoch %d: loss=%.4f" % (trial.number, epoch, loss), flush=True)
        trial.report(loss, epoch)
        if trial.should_prune():
            print("trial %d pruned at epoch %d" % (trial.number, epoch), flush=True)
            raise sweepd_worker.TrialPruned()
    return loss


if __name__ == "__main__":
    sweepd_worker.serve(objective)
