#!/usr/bin/env python3
"""What Optuna makes of a study with several objectives, as one JSON document on stdout.

usage: python tests/py/optuna_front.py DB_PATH STUDY_NAME [add-constrained]

{"directions": ["MINIMIZE", "MAXIMIZE"], "metric_names": ["loss", "acc"] | null,
 "best_trials": [{"number": 3, "values": [0.5, "inf"]}, ...]}   # study.best_trials, in order

With `add-constrained`, first adds two COMPLETE trials through Optuna's own API, both with
values better than any other on every objective: one infeasible (constraints [1.0]), one
feasible (constraints [0.0]); Optuna's best_trials must then leave the first out.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402

from _common import jsonable, quiet, require_db, storage_url, usage  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        usage("usage: optuna_front.py DB_PATH STUDY_NAME [add-constrained]")
    db_path, study_name = argv[1], argv[2]
    require_db(db_path)
    quiet()
    study = optuna.load_study(study_name=study_name, storage=storage_url(db_path))
    if len(argv) == 4:
        if argv[3] != "add-constrained":
            usage(f"unknown action {argv[3]!r}")
        # Better than anything on every objective, whatever the directions.
        best = [-1e9 if d == optuna.study.StudyDirection.MINIMIZE else 1e9
                for d in study.directions]
        template = next(t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
        for constraints in ([1.0], [0.0]):
            study.add_trial(optuna.trial.create_trial(
                params=template.params, distributions=template.distributions, values=best,
                system_attrs={"constraints": constraints}))
    doc = {
        "directions": [d.name for d in study.directions],
        "metric_names": study.metric_names,
        "best_trials": [{"number": t.number, "values": jsonable(t.values)}
                        for t in study.best_trials],
    }
    json.dump(doc, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
