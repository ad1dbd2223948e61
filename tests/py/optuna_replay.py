#!/usr/bin/env python3
"""Run an objective under Optuna itself with a sweepd study's params enqueued.

usage: python tests/py/optuna_replay.py DB_PATH STUDY_NAME OBJECTIVE OUT_DB

Loads sweepd's study from DB_PATH, creates the study "replay" in the SQLite
file OUT_DB (same direction), enqueues every trial's params in number order
(``study.enqueue_trial``, as Optuna users do) and runs
``study.optimize(objective, n_trials=<that many>)`` with Optuna's default
RandomSampler-free setup: the enqueued params decide every suggest, and the
NopPruner leaves pruning to the objective, as sweepd without a [pruner] does.
OBJECTIVE names one of tests/workers/define_by_run.py's OBJECTIVES.

Prints the number of trials run. The test then compares the two databases
row by row (params with their distribution_json text, values, intermediate
values, user attributes).
"""

from __future__ import annotations

import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def load_objectives():
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "..", "workers", "define_by_run.py")
    spec = importlib.util.spec_from_file_location("define_by_run", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OBJECTIVES


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        usage("usage: optuna_replay.py DB_PATH STUDY_NAME OBJECTIVE OUT_DB")
    db_path, study_name, objective, out_db = argv[1:]
    require_db(db_path)
    quiet()
    theirs = optuna.load_study(study_name=study_name, storage=storage_url(db_path))
    trials = sorted(theirs.get_trials(deepcopy=False), key=lambda t: t.number)
    ours = optuna.create_study(
        study_name="replay",
        storage=storage_url(out_db),
        direction=theirs.direction,
        pruner=optuna.pruners.NopPruner(),
    )
    for t in trials:
        ours.enqueue_trial(t.params)
    ours.optimize(
        load_objectives()[objective],
        n_trials=len(trials),
        catch=(Exception,),
    )
    print(len(ours.trials))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
