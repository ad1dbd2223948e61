#!/usr/bin/env python3
"""Read a study through optuna-dashboard's HTTP API, as its web page does, on one JSON line.

usage: python tests/py/dashboard_read.py DB_PATH_OR_URL STUDY_NAME

Starts the dashboard itself (`optuna_dashboard.run_server`, the server `optuna-dashboard URL`
runs) on a free loopback port, in a thread of this process, over the storage URL as a user
would give it (a PostgreSQL URL gets the psycopg2 driver named, see _common.storage_url), then
GETs `/api/studies` and `/api/studies/<id>` and prints:

{"summary": <the study's entry of /api/studies>, "detail": <GET /api/studies/<id>>}
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import quiet, storage_url, usage  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=60) as r:
        return json.loads(r.read())


def main() -> None:
    if len(sys.argv) != 3:
        usage(__doc__)
    quiet()
    import optuna_dashboard

    url, name = storage_url(sys.argv[1]), sys.argv[2]
    port = free_port()
    server = threading.Thread(
        target=optuna_dashboard.run_server,
        args=(url,),
        kwargs={"host": "127.0.0.1", "port": port},
        daemon=True,
    )
    server.start()
    for _ in range(600):
        try:
            studies = get(port, "/api/studies")
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("the dashboard did not answer on port %d" % port)
    summary = [s for s in studies["study_summaries"] if s["study_name"] == name]
    if len(summary) != 1:
        sys.exit("study %r listed %d times: %s" % (name, len(summary), studies))
    detail = get(port, "/api/studies/%d" % summary[0]["study_id"])
    print(json.dumps({"summary": summary[0], "detail": detail}))


if __name__ == "__main__":
    main()
