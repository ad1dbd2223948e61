#!/usr/bin/env python3
"""What optuna-dashboard serves for a study, as one JSON document on stdout.

usage: python tests/py/dashboard_front.py DB_PATH STUDY_NAME

Runs optuna-dashboard's own WSGI application in process (no server, no browser) and asks its
API for the study, as the dashboard's page does before it draws the Pareto-front plot:

{"directions": ["minimize", "maximize"], "objective_names": ["loss", "accuracy"] | null,
 "best_trials": [3, 5, ...],                 # the trials the plot marks as the front
 "trials": [{"number": 0, "state": "Complete", "values": [..] | null}, ...]}
"""

from __future__ import annotations

import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna_dashboard  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def get(app, path: str):
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "test",
        "SERVER_PORT": "80", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http", "wsgi.version": (1, 0), "wsgi.multithread": False,
        "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    status = []
    body = b"".join(app(environ, lambda s, h, exc=None: status.append(s)))
    if not status or not status[0].startswith("200"):
        raise SystemExit(f"GET {path}: {status} {body[:500]!r}")
    return json.loads(body)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        usage("usage: dashboard_front.py DB_PATH STUDY_NAME")
    db_path, study_name = argv[1], argv[2]
    require_db(db_path)
    quiet()
    app = optuna_dashboard.wsgi(storage_url(db_path))
    studies = get(app, "/api/studies")["study_summaries"]
    study_id = next(s["study_id"] for s in studies if s["study_name"] == study_name)
    detail = get(app, f"/api/studies/{study_id}")
    doc = {
        "directions": detail["directions"],
        "objective_names": detail.get("objective_names"),
        "best_trials": [t["number"] for t in detail["best_trials"]],
        "trials": [{"number": t["number"], "state": t["state"], "values": t.get("values")}
                   for t in detail["trials"]],
    }
    json.dump(doc, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
