#!/usr/bin/env python3
"""Dump a study as Optuna itself sees it, as one JSON document on stdout.

usage: python tests/py/optuna_dump.py DB_PATH STUDY_NAME

{
  "optuna_version": "5.0.0",
  "direction": "MINIMIZE" | "MAXIMIZE",       # objective 0
  "directions": ["MINIMIZE", ...],            # all objectives
  "best_trial": 7 | null,                     # study.best_trial's number (one objective)
  "trials": [                                 # ordered by number
    {"number": 0, "trial_id": 1, "state": "COMPLETE",
     "value": 1.5 | null | "inf" | "-inf",    # objective 0
     "values": [...] | null,                  # all objectives
     "params": {"x": 0.5, "opt": "adam", "n": 4},          # external values
     "distributions": {"x": {"name": "FloatDistribution", "attributes": {...}}},
     "intermediate_values": {"0": 0.3, "1": 0.2},
     "system_attrs": {...}, "user_attrs": {...},
     "constraints": {"mem": 0.5},             # Optuna 5's trial.constraints
     "datetime_start": "2026-01-01T12:00:00.123456" | null,
     "datetime_complete": ... | null}
  ]
}

Ints stay ints; non-finite floats are the strings "inf", "-inf", "nan"
(the JSON is written with allow_nan=False).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402
from optuna.distributions import distribution_to_json  # noqa: E402

from _common import jsonable, quiet, require_db, storage_url, usage  # noqa: E402


def iso(dt):
    return None if dt is None else dt.isoformat()


def dump_trial(t: optuna.trial.FrozenTrial) -> dict:
    values = t.values
    value = None if values is None else values[0]
    return {
        "number": t.number,
        "trial_id": t._trial_id,
        "state": t.state.name,
        "value": jsonable(value),
        "values": jsonable(values),
        "params": jsonable(t.params),
        "distributions": {
            name: json.loads(distribution_to_json(d)) for name, d in t.distributions.items()
        },
        "intermediate_values": {
            str(step): jsonable(v) for step, v in sorted(t.intermediate_values.items())
        },
        "system_attrs": jsonable(t.system_attrs),
        "constraints": jsonable(t.constraints),
        "user_attrs": jsonable(t.user_attrs),
        "datetime_start": iso(t.datetime_start),
        "datetime_complete": iso(t.datetime_complete),
    }


def best_number(study) -> int | None:
    """Optuna's `study.best_trial` (the best feasible one), or None where it has none."""
    try:
        return study.best_trial.number
    except (RuntimeError, ValueError):
        return None


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        usage("usage: optuna_dump.py DB_PATH STUDY_NAME")
    db_path, study_name = argv[1], argv[2]
    require_db(db_path)
    quiet()
    study = optuna.load_study(study_name=study_name, storage=storage_url(db_path))
    directions = [d.name for d in study.directions]
    trials = sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)
    doc = {
        "optuna_version": optuna.__version__,
        "direction": directions[0],
        "directions": directions,
        "trials": [dump_trial(t) for t in trials],
        "best_trial": best_number(study),
    }
    json.dump(doc, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
