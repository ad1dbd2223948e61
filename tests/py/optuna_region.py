#!/usr/bin/env python3
"""Optimize a study with real Optuna, beside a sweepd daemon, over a grid of x.

usage: python tests/py/optuna_region.py DB_PATH STUDY_NAME N LOW HIGH TARGET

Runs ``study.optimize(objective, n_trials=N)`` on the existing study with
Optuna's GridSampler over N values of x evenly spread over [LOW, HIGH] (not
enqueued: a WAITING trial would be claimed by the daemon as well): the
objective suggests x in [-2, 2] (the tests' one-param space), reports
v + 2, v + 1 and v at steps 0, 1 and 2, and returns v = (x - TARGET)^2 - 100,
far better than any value the daemon's own objective (x^2) gives. A daemon
that learns these trials while it runs proposes near TARGET, and its median
pruner prunes its own, worse curves. Prints the numbers of the trials it ran.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 7:
        usage("usage: optuna_region.py DB_PATH STUDY_NAME N LOW HIGH TARGET")
    db_path, study_name = argv[1], argv[2]
    n = int(argv[3])
    low, high, target = float(argv[4]), float(argv[5]), float(argv[6])
    require_db(db_path)
    quiet()
    ran = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -2.0, 2.0)
        v = (x - target) ** 2 - 100.0
        for step in range(3):
            trial.report(v + (2 - step), step)
        ran.append(trial.number)
        return v

    grid = [low + (high - low) * i / max(n - 1, 1) for i in range(n)]
    study = optuna.load_study(
        study_name=study_name,
        storage=storage_url(db_path),
        sampler=optuna.samplers.GridSampler({"x": grid}, seed=0),
    )
    study.optimize(objective, n_trials=n, catch=())
    print(" ".join(str(r) for r in ran))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
