#!/usr/bin/env python3
"""Optimize a study with real Optuna, beside sweepd, over the tests' default space.

usage: python tests/py/optuna_optimize.py DB_PATH STUDY_NAME N [SLEEP_S] [HOLD_FILE]

Runs study.optimize(objective, n_trials=N) on an existing study (created by
sweepd or by optuna_create.py). The objective suggests the same params as
tests/common's DEFAULT_PARAMS (x, lr, n, opt), sleeps SLEEP_S seconds
(default 0), and, when HOLD_FILE is given, first writes HOLD_FILE + ".running"
and then waits until HOLD_FILE exists: a trial that stays RUNNING for as long
as the test wants. Prints the numbers of the trials it ran, space-separated.
Any exception (Optuna's "Should not reach" included) exits non-zero.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5, 6):
        usage("usage: optuna_optimize.py DB_PATH STUDY_NAME N [SLEEP_S] [HOLD_FILE]")
    db_path, study_name, n = argv[1], argv[2], int(argv[3])
    sleep = float(argv[4]) if len(argv) >= 5 else 0.0
    hold = argv[5] if len(argv) == 6 else None
    require_db(db_path)
    quiet()
    ran = []

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -2.0, 2.0)
        trial.suggest_float("lr", 1e-5, 1e-1, log=True)
        trial.suggest_int("n", 0, 10, step=2)
        trial.suggest_categorical("opt", ["adam", "sgd", "rmsprop"])
        ran.append(trial.number)
        if hold:
            with open(hold + ".running", "w") as f:
                f.write(str(trial.number))
            while not os.path.exists(hold):
                time.sleep(0.05)
        time.sleep(sleep)
        return x * x

    study = optuna.load_study(study_name=study_name, storage=storage_url(db_path))
    study.optimize(objective, n_trials=n, catch=())
    print(" ".join(str(r) for r in ran))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
