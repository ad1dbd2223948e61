#!/usr/bin/env python3
"""The Hyperband bracket Optuna's own HyperbandPruner gives each trial of a study, as one JSON
document on stdout.

usage: python tests/py/optuna_brackets.py DB_PATH STUDY_NAME MIN_RESOURCE MAX_RESOURCE FACTOR

{"n_brackets": 4, "brackets": {"0": 1, "1": 0, ...}}   # trial number -> bracket id
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 6:
        usage("usage: optuna_brackets.py DB_PATH STUDY_NAME MIN_RESOURCE MAX_RESOURCE FACTOR")
    db_path, study_name = argv[1], argv[2]
    min_resource, max_resource, factor = (int(a) for a in argv[3:])
    require_db(db_path)
    quiet()
    study = optuna.load_study(study_name=study_name, storage=storage_url(db_path))
    pruner = optuna.pruners.HyperbandPruner(min_resource=min_resource, max_resource=max_resource,
                                            reduction_factor=factor)
    pruner._try_initialization(study)
    brackets = {str(t.number): pruner._get_bracket_id(study, t) for t in study.trials}
    json.dump({"n_brackets": pruner._n_brackets, "brackets": brackets}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
