#!/usr/bin/env python3
"""Run Optuna's own schema migrations, and table rebuilds like them, on a database.

usage: python tests/py/optuna_migrate.py DB_PATH

On SQLite, alembic changes a table by rebuilding it: CREATE _alembic_tmp_t,
copy the rows, DROP t, ALTER TABLE _alembic_tmp_t RENAME TO t. Since SQLite
3.26 that RENAME re-checks every view and trigger in the file, so anything
another program keeps in the database that names a missing table makes the
migration fail. In order, this script runs:

1. `optuna storage upgrade` (Optuna's CLI) on the database as it is.
2. Optuna's real migration v3.0.0.d both ways: downgrade to v3.0.0.c (rebuilds
   trial_values without value_type; infinities become +-float32 max), then
   `optuna storage upgrade` back to head (rebuilds trial_values again, maps
   the values back, and runs v3.2.0.a). Before the downgrade the revision is
   stamped v3.0.0.d instead of downgrading v3.2.0.a: that step only drops an
   index, which Optuna >= 3.2 creates under another name, so it fails even on
   a database plain Optuna created.
3. A rebuild of every Optuna table with alembic's batch mode
   (recreate="always"): what any future Optuna migration does to a table.

Prints {"steps": [...]} on stdout; fails with Optuna's or SQLite's error.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import alembic.command  # noqa: E402
import sqlalchemy  # noqa: E402
from alembic.migration import MigrationContext  # noqa: E402
from alembic.operations import Operations  # noqa: E402
from optuna.storages import RDBStorage  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402

# version_info is left out: alembic cannot carry its unnamed CHECK constraint over, and no
# sweepd object is attached to it.
OPTUNA_TABLES = [
    "studies",
    "study_directions",
    "study_user_attributes",
    "study_system_attributes",
    "trials",
    "trial_user_attributes",
    "trial_system_attributes",
    "trial_params",
    "trial_values",
    "trial_intermediate_values",
    "trial_heartbeats",
]


def optuna_cli(*args: str) -> str:
    """Optuna's command line (the `optuna` entry point), in a child process."""
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from optuna.cli import main; sys.exit(main())", *args],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"optuna {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout + out.stderr


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        usage("usage: optuna_migrate.py DB_PATH")
    db_path = argv[1]
    require_db(db_path)
    quiet()
    # A root handler keeps Optuna's alembic env.py from configuring INFO logging to stderr.
    logging.basicConfig(level=logging.WARNING)
    url = storage_url(db_path)
    steps = []

    optuna_cli("storage", "upgrade", "--storage", url)
    steps.append("optuna storage upgrade (up to date)")

    storage = RDBStorage(url, skip_compatibility_check=True, skip_table_creation=True)
    config = storage._version_manager._create_alembic_config()
    storage.engine.dispose()
    alembic.command.stamp(config, "v3.0.0.d")
    alembic.command.downgrade(config, "v3.0.0.c")
    steps.append("downgrade v3.0.0.d -> v3.0.0.c")
    optuna_cli("storage", "upgrade", "--storage", url)
    steps.append("optuna storage upgrade v3.0.0.c -> head")

    engine = sqlalchemy.create_engine(url)
    with engine.begin() as conn:
        op = Operations(MigrationContext.configure(conn))
        for table in OPTUNA_TABLES:
            with op.batch_alter_table(table, recreate="always"):
                pass
            steps.append(f"rebuilt {table}")
    engine.dispose()

    revision = RDBStorage(url).get_current_version()
    print(json.dumps({"steps": steps, "revision": revision}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
