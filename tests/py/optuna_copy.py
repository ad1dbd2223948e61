#!/usr/bin/env python3
"""Copy a study within its database with optuna.copy_study, then list the
database's studies with Optuna's command line.

usage: python tests/py/optuna_copy.py DB_PATH FROM_STUDY TO_STUDY

Prints {"studies": [...]}: the output of
`optuna studies --storage sqlite:///DB_PATH -f json` (name, direction,
n_trials, ... per study).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        usage("usage: optuna_copy.py DB_PATH FROM_STUDY TO_STUDY")
    db_path, from_study, to_study = argv[1], argv[2], argv[3]
    require_db(db_path)
    quiet()
    url = storage_url(db_path)
    optuna.copy_study(
        from_study_name=from_study, from_storage=url, to_storage=url, to_study_name=to_study
    )
    # The `optuna` entry point, in a child process as a user would run it.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from optuna.cli import main; sys.exit(main())",
            "studies",
            "--storage",
            url,
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        print(f"optuna studies failed ({out.returncode}):\n{out.stderr}", file=sys.stderr)
        return 1
    print(json.dumps({"studies": json.loads(out.stdout)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
