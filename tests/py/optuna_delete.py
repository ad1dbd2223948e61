#!/usr/bin/env python3
"""Delete a study with optuna.delete_study, as a user would.

usage: python tests/py/optuna_delete.py DB_PATH STUDY_NAME [--foreign-keys]

--foreign-keys turns SQLite's foreign key enforcement on for every connection
Optuna's engine opens (PRAGMA foreign_keys=ON from an SQLAlchemy "connect"
listener), as some users configure it; Optuna's default leaves it off.
Fails unless the study is gone afterwards: Optuna swallows an integrity
error in delete_study, so a delete that a constraint blocked would otherwise
look like a success. Prints {"deleted": STUDY_NAME, "foreign_keys": 0|1}.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402
from sqlalchemy import event  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4) or (len(argv) == 4 and argv[3] != "--foreign-keys"):
        usage("usage: optuna_delete.py DB_PATH STUDY_NAME [--foreign-keys]")
    db_path, study_name = argv[1], argv[2]
    require_db(db_path)
    quiet()
    storage = optuna.storages.RDBStorage(storage_url(db_path))
    if len(argv) == 4:

        @event.listens_for(storage.engine, "connect")
        def _foreign_keys(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            dbapi_connection.execute("PRAGMA foreign_keys=ON")

        # Connections opened before the listener existed would keep foreign keys off.
        storage.engine.dispose()
    with storage.engine.connect() as conn:
        foreign_keys = conn.exec_driver_sql("PRAGMA foreign_keys").scalar()
    optuna.delete_study(study_name=study_name, storage=storage)
    if study_name in optuna.get_all_study_names(storage):
        print(f"optuna.delete_study left study {study_name!r} in place", file=sys.stderr)
        return 1
    print(json.dumps({"deleted": study_name, "foreign_keys": foreign_keys}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
