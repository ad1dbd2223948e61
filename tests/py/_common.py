"""Shared helpers for the Optuna interop scripts in tests/py/.

These scripts are run by sweepd's integration tests with the test venv's
python (requirements-test.txt pins optuna). They talk to the database only
through Optuna's public API, so they check that what sweepd writes is what
Optuna itself reads.
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import optuna


def storage_url(db_path: str) -> str:
    # A PostgreSQL URL as sweepd takes it: SQLAlchemy 2.1 reads plain postgresql:// as
    # psycopg 3, and the test venv has psycopg2, so name the driver.
    for scheme in ("postgresql://", "postgres://"):
        if db_path.startswith(scheme):
            return "postgresql+psycopg2://" + db_path[len(scheme):]
    if "://" in db_path:
        return db_path
    # sqlite:/// + absolute path gives sqlite:////abs/path (four slashes).
    return "sqlite:///" + os.path.abspath(db_path)


def quiet() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    optuna.logging.disable_default_handler()
    # Anything Optuna still wants to say goes to stderr, never stdout.
    optuna.logging.enable_propagation()


def jsonable(value: Any) -> Any:
    """Make a value JSON-serialisable with allow_nan=False.

    Non-finite floats become the strings "inf", "-inf" and "nan"; ints stay
    ints (bool stays bool); containers are converted recursively.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    # numpy scalars (e.g. from a user attr) -> python scalars
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, (str, bytes)):
        try:
            return jsonable(item())
        except (TypeError, ValueError):
            pass
    return value


def usage(msg: str) -> None:
    print(msg, file=sys.stderr)
    sys.exit(2)


def require_db(db_path: str) -> None:
    # optuna.load_study on a missing file would quietly create an empty Optuna
    # database there; a test pointing at the wrong path should fail instead.
    if "://" not in db_path and not os.path.isfile(db_path):
        usage(f"no such database: {db_path}")
