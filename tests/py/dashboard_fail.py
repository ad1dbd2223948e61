#!/usr/bin/env python3
"""Mark a running trial FAIL through optuna-dashboard's HTTP API, as its "Fail" button does.

usage: python tests/py/dashboard_fail.py DB_PATH STUDY_NAME TRIAL_NUMBER

Serves optuna-dashboard (the WSGI app its `optuna-dashboard` command serves) on a free
loopback port, finds the trial's id through GET /api/studies/<id>, and sends
POST /api/trials/<trial_id>/tell {"state": "Fail"}. Prints the answer's HTTP status (204).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import quiet, require_db, storage_url, usage  # noqa: E402


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):  # no access log on stderr
        pass


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        usage("usage: dashboard_fail.py DB_PATH STUDY_NAME TRIAL_NUMBER")
    db_path, study_name, number = argv[1], argv[2], int(argv[3])
    require_db(db_path)
    quiet()
    from optuna_dashboard import wsgi

    server = make_server("127.0.0.1", 0, wsgi(storage_url(db_path)), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d" % server.server_port

    def get(path):
        with urllib.request.urlopen(base + path, timeout=60) as r:
            return json.loads(r.read())

    try:
        studies = get("/api/studies")["study_summaries"]
        study_id = next(s["study_id"] for s in studies if s["study_name"] == study_name)
        trials = get("/api/studies/%d" % study_id)["trials"]
        trial_id = next(t["trial_id"] for t in trials if t["number"] == number)
        request = urllib.request.Request(
            base + "/api/trials/%d/tell" % trial_id,
            data=json.dumps({"state": "Fail"}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=60) as r:
            print(r.status)
    finally:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
