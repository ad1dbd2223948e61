#!/usr/bin/env python3
"""Ask optuna-dashboard's HTTP API for a study's trials, as its web page does.

usage: python tests/py/dashboard_api.py DB_PATH STUDY_NAME

Serves optuna-dashboard (the WSGI app its `optuna-dashboard` command serves) on a free
loopback port, requests GET /api/studies and GET /api/studies/<id> over HTTP, and prints the
trials of STUDY_NAME as the page receives them: one JSON document
{"trials": [{"number", "state", "user_attrs": {key: value}, ...}]}.
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
    if len(argv) != 3:
        usage("usage: dashboard_api.py DB_PATH STUDY_NAME")
    db_path, study_name = argv[1], argv[2]
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
        detail = get("/api/studies/%d" % study_id)
    finally:
        server.shutdown()
    trials = [
        {
            "number": t["number"],
            "state": t["state"],
            "user_attrs": {a["key"]: a["value"] for a in t["user_attrs"]},
        }
        for t in detail["trials"]
    ]
    print(json.dumps({"trials": trials}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
