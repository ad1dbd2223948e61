#!/usr/bin/env python3
"""Enqueue trials with real Optuna, in order; print each new WAITING trial's number.

usage: python tests/py/optuna_enqueue.py DB_PATH STUDY_NAME JSON_PARAMS [JSON_PARAMS ...]
e.g.   python tests/py/optuna_enqueue.py sweepd.db s '{"x": 1.5, "opt": "sgd"}'

Optuna writes a trial in state WAITING with NULL datetime_start and
datetime_complete, no trial_params rows, and the trial system attribute
'fixed_params' whose value_json is json.dumps(params).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) < 4:
        usage("usage: optuna_enqueue.py DB_PATH STUDY_NAME JSON_PARAMS [JSON_PARAMS ...]")
    db_path, study_name = argv[1], argv[2]
    require_db(db_path)
    all_params = [json.loads(p) for p in argv[3:]]
    if not all(isinstance(p, dict) for p in all_params):
        usage("JSON_PARAMS must be a JSON object")
    quiet()
    study = optuna.load_study(study_name=study_name, storage=storage_url(db_path))
    for params in all_params:
        before = {t._trial_id for t in study.get_trials(deepcopy=False)}
        study.enqueue_trial(params)
        new = [
            t
            for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if t._trial_id not in before
        ]
        if len(new) != 1:
            print(f"expected one new WAITING trial, found {len(new)}", file=sys.stderr)
            return 1
        print(new[0].number)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
