#!/usr/bin/env python3
"""Coordination cost of several sweepd hosts on one PostgreSQL study, against Optuna's RDB storage.

Run with the test venv's Python (Optuna 5.0 and psycopg2 from requirements-test.txt)::

    .venv/bin/python bench/postgres_bench.py                 # what `make bench` runs
    .venv/bin/python bench/postgres_bench.py --seconds 5 --sizes 200,1000 --no-doc   # smoke test

It starts a throwaway PostgreSQL cluster of its own (``initdb`` and ``pg_ctl`` from Debian's
``postgresql`` package or ``pg_config --bindir``, in a temporary directory, on a loopback port,
as ``nobody`` when run as root since the server refuses root; stopped and deleted at the end),
with the server's default durability (``fsync``, ``synchronous_commit``): a commit waits for
its WAL on the disk, as on a real server. Every "host" is a ``target/release/sweepd run`` with
its own ``SWEEPD_HOST_ID`` and directory, all on one database and study.

1. **Coordination at 50 ms trials.** 1, 2 and 4 daemons of 2 slots each, persistent Python
   workers whose objective sleeps exactly 50 ms, random sampler, ``--seconds`` of ideal run time
   (n_trials = ideal rate x seconds). Throughput against the ideal, slots / trial length
   (40 trials/s per daemon), over the middle 80% of the completions (no start-up, no tail).
2. **Per-trial cost at 1k and 10k trials.** The same daemons with an objective that returns at
   once, and Optuna processes (``study.optimize`` with ``RandomSampler``, one trial at a time
   each, the same 4 params and objective) on the same server through
   ``postgresql+psycopg2://``; 1, 2 and 4 processes on each side. Throughput from the trials'
   ``datetime_complete`` in the database; sweepd's study of 1k and of 10k trials are separate
   runs, Optuna's 1k figure is its first 1000 trials of the 10k run (the same study up to there).

Writes its section of ``docs/benchmarks.md`` (between ``<!-- bench:postgres -->`` and
``<!-- /bench:postgres -->``) and raw results to ``target/bench/postgres_bench.json``.
"""

import argparse
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402

RAW = "postgres_bench.json"


log = bl.log


# ----------------------------------------------------------------------------------------------
# A throwaway PostgreSQL cluster


def pg_bindir():
    """Where initdb and pg_ctl are: pg_config's bindir, Debian's versioned directory (newest
    first; not on PATH there), or PATH."""
    try:
        d = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        if d and (Path(d) / "initdb").exists():
            return Path(d)
    except OSError:
        pass
    debian = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True) if Path("/usr/lib/postgresql").exists() else []
    if debian:
        return debian[0].parent
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    sys.exit("postgres_bench: no initdb found: install PostgreSQL (Debian: apt-get install postgresql)")


class Cluster:
    def __init__(self, parent):
        self.bindir = pg_bindir()
        self.dir = Path(tempfile.mkdtemp(prefix="sweepd-pgbench-", dir=parent))
        self.user = "nobody" if os.geteuid() == 0 else None
        if self.user:
            pw = pwd.getpwnam(self.user)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.data = self.dir / "data"
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale")
        # pg_stat_statements (PostgreSQL's contrib, in Debian's postgresql package) counts the
        # statements per trial; the figures go without it where it is not installed.
        libdir = self._out("pg_config", "--pkglibdir") or str(self.bindir.parent / "lib")
        self.statements = (Path(libdir) / "pg_stat_statements.so").exists()
        with open(self.data / "postgresql.conf", "a") as f:
            f.write("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"
                    "max_connections = 200\nshared_buffers = 128MB\n" % (self.port, self.dir))
            if self.statements:
                f.write("shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.max = 1000\n")
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "server.log"), "-w", "-t", "120", "start")
        self.version = self._out("postgres", "--version")
        if self.statements:
            self._sql("postgres", "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        log("PostgreSQL cluster %s on port %d (%s)" % (self.dir, self.port, self.version))

    def _cmd(self, program, *args):
        cmd = [str(self.bindir / program)] + list(args)
        if self.user:
            cmd = ["runuser", "-u", self.user, "--"] + cmd
        return cmd

    def _pg(self, program, *args):
        subprocess.run(self._cmd(program, *args), cwd=self.dir, check=True, stdout=subprocess.DEVNULL)

    def _out(self, program, *args):
        return subprocess.run(self._cmd(program, *args), cwd=self.dir, capture_output=True, text=True).stdout.strip()

    def _sql(self, db, sql, args=()):
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=db)
        conn.autocommit = True
        cur = conn.cursor()
        cur.execute(sql, args)
        rows = cur.fetchall() if cur.description else []
        conn.close()
        return rows

    def counters(self, db):
        """(commits, statements) the server counted for database `db` so far (statements:
        None without pg_stat_statements)."""
        commits = self._sql("postgres", "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (db,))
        statements = None
        if self.statements:
            statements = self._sql("postgres", "SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements "
                                   "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)", (db,))[0][0]
        return (commits[0][0] if commits else 0), (int(statements) if statements is not None else None)

    def statement_calls(self, db):
        """{query text: calls} pg_stat_statements counted for database `db` so far (empty
        without it): which statements a trial costs, not just how many."""
        if not self.statements:
            return {}
        rows = self._sql("postgres", "SELECT query, sum(calls), sum(total_exec_time) FROM pg_stat_statements "
                         "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s) GROUP BY query", (db,))
        return {q: (int(c), float(t)) for q, c, t in rows}

    def quiet(self, db):
        """Waits (up to 10 s) until no session of database `db` is left, so that the CPU of
        their backends has been counted into the postmaster's reaped children."""
        for _ in range(100):
            if not self._sql("postgres", "SELECT 1 FROM pg_stat_activity WHERE datname = %s", (db,)):
                break
            time.sleep(0.1)
        time.sleep(0.2)

    def cpu_s(self):
        """CPU seconds the server's processes used so far: the postmaster, its live children,
        and the children it has reaped (backends of closed connections). Read when no
        backend is exiting (see `quiet`)."""
        try:
            pid = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        tck = os.sysconf("SC_CLK_TCK")

        def stat(p):
            try:
                s = open("/proc/%d/stat" % p).read()
            except OSError:
                return None
            return s[s.rfind(")") + 2:].split()

        own = stat(pid)
        if not own:
            return None
        total = sum(int(x) for x in own[11:15])  # utime, stime, cutime, cstime
        for d in os.listdir("/proc"):
            if d.isdigit():
                st = stat(int(d))
                if st and int(st[1]) == pid:
                    total += int(st[11]) + int(st[12])
        return total / tck

    def url(self, db, driver=""):
        return "postgresql%s://postgres@127.0.0.1:%d/%s" % (driver, self.port, db)

    def create_db(self, db):
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres")
        conn.autocommit = True
        conn.cursor().execute('DROP DATABASE IF EXISTS "%s"' % db)
        conn.cursor().execute('CREATE DATABASE "%s"' % db)
        conn.close()
        return self.url(db)

    def trials(self, db, study):
        """(state, start, complete) of every trial of the study, times as epoch seconds."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, user="postgres", dbname=db)
        cur = conn.cursor()
        cur.execute("SELECT CAST(t.state AS TEXT), t.datetime_start, t.datetime_complete FROM trials t "
                    "JOIN studies s ON s.study_id = t.study_id WHERE s.study_name = %s ORDER BY t.number", (study,))
        rows = [(st, a.timestamp() if a else None, b.timestamp() if b else None) for st, a, b in cur.fetchall()]
        conn.close()
        return rows

    def stop(self):
        subprocess.run(self._cmd("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"), cwd=self.dir,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# Measuring

def sqlite_trials(path):
    """(state, start, complete) of a SQLite study's trials (the control run)."""
    import datetime
    import sqlite3

    def ts(x):
        return datetime.datetime.fromisoformat(x).timestamp() if x else None

    con = sqlite3.connect(str(path))
    rows = [(st, ts(a), ts(b)) for st, a, b in
            con.execute("SELECT state, datetime_start, datetime_complete FROM trials ORDER BY number")]
    con.close()
    return rows


def cpu_busy():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    idle = f[3] + (f[4] if len(f) > 4 else 0)
    return sum(f) - idle, sum(f)


def busy_share(before, after):
    db, dt = after[0] - before[0], after[1] - before[1]
    return db / dt if dt else float("nan")


def rate(times, a, b):
    """Completions per second between the a-th and b-th completion (sorted times)."""
    if b - 1 >= len(times) or b - 1 <= a:
        return None
    span = times[b - 1] - times[a]
    return (b - 1 - a) / span if span > 0 else None


def run_daemons(sweepd, cluster, workdir, name, hosts, par, n, sleep, sqlite=False):
    """`hosts` daemons of `par` slots on one fresh database, until n_trials = n are final
    (`sqlite`: one daemon on a SQLite file instead, the control)."""
    db = name
    url = "sqlite:///sweepd.db" if sqlite else cluster.create_db(db)
    base = Path(workdir) / name
    procs = []
    counters0 = None if sqlite else cluster.counters(db)
    calls0 = {} if sqlite else cluster.statement_calls(db)
    server0 = None if sqlite else cluster.cpu_s()
    load0 = os.getloadavg()
    cpu0, t0 = cpu_busy(), time.time()
    for h in range(hosts):
        d = base / ("host%d" % h)
        bl.write_instant_study(d, n, par, sampler="random", seed=h + 1, url=url, name="bench",
                               sleep=sleep)
        env = dict(os.environ, SWEEPD_HOST_ID="h%d" % h, SWEEPD_LOG="warn")
        out = open(d / "daemon.log", "w")
        procs.append((subprocess.Popen([str(sweepd), "run", "-c", str(d / "supervisor.toml")], cwd=d,
                                       stdout=out, stderr=subprocess.STDOUT, env=env), d, out))
    usage = []
    for p, d, out in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        out.close()
        usage.append(ru.ru_utime + ru.ru_stime)
        if p.returncode != 0:
            log("  %s exited %d: %s" % (d, p.returncode, (d / "daemon.log").read_text()[-2000:]))
    wall = time.time() - t0
    cpu1 = cpu_busy()
    busy = busy_share(cpu0, cpu1)
    if not sqlite:
        cluster.quiet(db)
    server_cpu = None if sqlite else cluster.cpu_s()
    counters1 = None if sqlite else cluster.counters(db)
    calls1 = {} if sqlite else cluster.statement_calls(db)
    rows = sqlite_trials(base / "host0" / "sweepd.db") if sqlite else cluster.trials(db, "bench")
    done = sorted(c for st, _, c in rows if st == "COMPLETE" and c)
    starts = [s for _, s, _ in rows if s]
    k = len(done)
    res = {"hosts": hosts, "par": par, "n": n, "sleep_s": sleep, "wall_s": wall, "complete": k,
           "engine": "sqlite" if sqlite else "postgres",
           "server_cpu_s": (server_cpu - server0) if server_cpu is not None and server0 is not None else None,
           "commits": (counters1[0] - counters0[0]) if counters0 else None,
           "statements": (counters1[1] - counters0[1]) if counters0 and counters0[1] is not None else None,
           "load_start": load0, "load_end": os.getloadavg(), "cores_s": (cpu1[1] - cpu0[1]) / os.sysconf("SC_CLK_TCK"),
           "states": {st: sum(1 for r in rows if r[0] == st) for st in {r[0] for r in rows}},
           "rcs": [p.returncode for p, _, _ in procs], "cpu_s_daemons_and_workers": usage,
           "machine_busy": busy,
           # Per statement text, calls during the run, most first: where the statements per
           # trial come from.
           "statement_calls": sorted(([q, c - calls0.get(q, (0, 0.0))[0], t - calls0.get(q, (0, 0.0))[1]]
                                      for q, (c, t) in calls1.items() if c > calls0.get(q, (0, 0.0))[0]),
                                     key=lambda x: -x[1]),
           "first_start_to_last_complete_s": (done[-1] - min(starts)) if done and starts else None}
    # From a trial's start to its completion, as the database stamped them: a slot's next trial
    # starts in the commit that finishes its last, so this is a slot's whole cycle per trial.
    spans = sorted(c - s for st, s, c in rows if st == "COMPLETE" and s and c)
    res["trial_span_median_s"] = spans[len(spans) // 2] if spans else None
    res["rate_middle80"] = rate(done, k // 10, k - k // 10)
    res["rate_whole"] = k / res["first_start_to_last_complete_s"] if res["first_start_to_last_complete_s"] else None
    res["rate_first_1k"] = rate(done, 0, min(1000, k))
    res["rate_last_1k"] = rate(done, max(0, k - 1000), k) if k >= 2000 else None
    return res


OPTUNA_CHILD = '''
import sys, time, optuna
sys.path.insert(0, sys.argv[5])
from benchlib import instant_objective
optuna.logging.set_verbosity(optuna.logging.WARNING)
url, n, seed, deadline = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
study = optuna.load_study(study_name="bench", storage=url, sampler=optuna.samplers.RandomSampler(seed=seed))
end = time.time() + deadline
def stop_at_deadline(study, trial):
    if time.time() > end:
        study.stop()
study.optimize(instant_objective, n_trials=n, callbacks=[stop_at_deadline])
'''


def run_optuna(cluster, name, procs, n, deadline):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cluster.create_db(name)
    url = cluster.url(name, "+psycopg2")
    optuna.create_study(study_name="bench", storage=url, direction="minimize")
    cluster.quiet(name)
    counters0, server0, load0 = cluster.counters(name), cluster.cpu_s(), os.getloadavg()
    cpu0, t0 = cpu_busy(), time.time()
    # Each process runs its share of the study (`n_trials = n / procs`), as people split a
    # budget over processes; `MaxTrialsCallback` would read the whole study after every trial.
    shares = [n // procs + (1 if i < n % procs else 0) for i in range(procs)]
    ps = [subprocess.Popen([sys.executable, "-c", OPTUNA_CHILD, url, str(shares[i]), str(i + 1), str(deadline),
                           str(bl.BENCH_DIR)])
          for i in range(procs)]
    rcs, usage = [], []
    for p in ps:
        _, status, ru = os.wait4(p.pid, 0)
        rcs.append(os.waitstatus_to_exitcode(status))
        usage.append(ru.ru_utime + ru.ru_stime)
    wall = time.time() - t0
    cpu1 = cpu_busy()
    busy = busy_share(cpu0, cpu1)
    cluster.quiet(name)
    server1, counters1 = cluster.cpu_s(), cluster.counters(name)
    rows = cluster.trials(name, "bench")
    done = sorted(c for st, _, c in rows if st == "COMPLETE" and c)
    k = len(done)
    res = {"procs": procs, "n": n, "wall_s": wall, "complete": k, "rcs": rcs, "machine_busy": busy,
           "client_cpu_s": usage,
           "server_cpu_s": (server1 - server0) if server1 is not None and server0 is not None else None,
           "commits": counters1[0] - counters0[0],
           "statements": (counters1[1] - counters0[1]) if counters0[1] is not None else None,
           "load_start": load0, "load_end": os.getloadavg(),
           "reached": k >= n, "deadline_s": deadline,
           "first_start_to_last_complete_s": (done[-1] - min(s for _, s, _ in rows if s)) if done else None}
    res["rate_whole"] = k / res["first_start_to_last_complete_s"] if res["first_start_to_last_complete_s"] else None
    res["rate_first_1k"] = rate(done, 0, min(1000, k)) if k >= 1000 else None
    res["rate_last_1k"] = rate(done, max(0, k - 1000), k) if k >= 2000 else None
    res["last_window"] = [max(0, k - 1000), k]
    return res


# ----------------------------------------------------------------------------------------------
# The document


def f(x, digits=1):
    return "n/a" if x is None else ("%%.%df" % digits) % x


def render(raw):
    info, args = raw["info"], raw["args"]
    L = ["## PostgreSQL: several hosts on one study, and Optuna's RDB storage", ""]
    L += bl.machine_lines(info, raw["load_end"], "other work on the machine inflates timings") + [
        "- Command: `make bench` (runs `.venv/bin/python bench/postgres_bench.py`); this run: `%s`" % raw["command"],
        "- Server: a throwaway cluster started by the script (`initdb`, `pg_ctl`) on a loopback port of the same machine, "
        "default durability (`fsync = on`, `synchronous_commit = on`: every commit waits for the WAL on disk), "
        "`shared_buffers = 128MB`. Every sweepd \"host\" is a `target/release/sweepd run` with its own `SWEEPD_HOST_ID`; "
        "hosts, workers, Optuna processes and the server all share the machine's %s cores; %s."
        % (info["nproc"], info["postgres"]),
        "- Runtime: %.0f s in all; raw results: `target/bench/%s`" % (raw["total_s"], RAW),
        "",
        "### 1. Coordination: hosts of 2 slots, trials of exactly 50 ms",
        "",
        "Persistent Python workers (`sweepd_worker.serve`) whose objective sleeps 50 ms; `sampler = \"random\"`; "
        "n_trials = ideal rate x %g s. Ideal = slots / trial length = 40 trials/s per host. Throughput over the middle 80%% "
        "of the completions (by `datetime_complete`), so start-up and the last trials do not count; `whole` is all trials "
        "from the first start to the last completion. CPU per trial: the daemons and their workers (`wait4`) and the "
        "server's processes (`/proc`); `machine busy` is the share of all cores busy during the run (`/proc/stat`, other "
        "work on the machine included) and the load average says how much other work there was. The SQLite row is the "
        "same daemon on a SQLite file (one host), run in the same invocation: what the machine allows without PostgreSQL." % args["seconds"],
        "",
        "| run | n_trials | ideal trials/s | trials/s (middle 80%) | of ideal | trials/s (whole) | CPU ms/trial: daemons + workers / server | machine busy | load avg, start -> end | commits / trial | statements / trial |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in raw["coordination"]:
        ideal = r["hosts"] * r["par"] / r["sleep_s"]
        what = "%d host%s x %d slots%s" % (r["hosts"], "" if r["hosts"] == 1 else "s", r["par"],
                                          ", **SQLite** (control)" if r.get("engine") == "sqlite" else "")
        L.append("| %s | %d | %.0f | %s | **%s** | %s | %s / %s | %.0f%% | %s -> %s | %s | %s |" % (
            what, r["n"], ideal, f(r["rate_middle80"]),
            f(r["rate_middle80"] / ideal if r["rate_middle80"] else None, 3), f(r["rate_whole"]),
            f(1e3 * sum(r["cpu_s_daemons_and_workers"]) / r["complete"], 2),
            f(1e3 * r["server_cpu_s"] / r["complete"], 2) if r.get("server_cpu_s") is not None else "-",
            100 * r["machine_busy"], f(r["load_start"][0], 2), f(r["load_end"][0], 2),
            f(r["commits"] / r["complete"], 1) if r.get("commits") is not None else "-",
            f(r["statements"] / r["complete"], 1) if r.get("statements") is not None else "-"))
    busiest = max((r for r in raw["coordination"] if r.get("statement_calls")), key=lambda r: r["hosts"], default=None)
    if busiest:
        k = busiest["complete"]
        L += ["", "Where the statements of a trial go (the %d-host run, `pg_stat_statements`: calls per completed trial, "
              "mean execution time on the server; a lock's wait counts in its statement's time; statements under 0.02 "
              "per trial left out). Median trial, start to completion as the database stamped them (a slot's whole "
              "cycle: its next trial starts in the commit that finishes the last): %s ms on PostgreSQL, %s ms on "
              "SQLite." % (busiest["hosts"], f(1e3 * busiest["trial_span_median_s"]) if busiest.get("trial_span_median_s") else "n/a",
                           f(1e3 * control_span) if (control_span := next((r.get("trial_span_median_s") for r in raw["coordination"]
                                                                            if r.get("engine") == "sqlite"), None)) else "n/a"), "",
              "| statement | per trial | mean ms |", "|---|---|---|"]
        for q, c, t in busiest["statement_calls"]:
            if c >= k / 50:
                text = " ".join(q.split())
                text = (text[:140] + " ...") if len(text) > 140 else text
                L.append("| `%s` | %.3f | %.3f |" % (text.replace("|", "\\|"), c / k, t / max(c, 1)))
    L += ["", "### 2. Per-trial cost: instant trials, sweepd against Optuna's RDB storage on the same server", "",
          "Both sides: the same 4 params (float, int with step, categorical, log float) and objective, random sampler "
          "(storage and coordination are measured here, not the samplers). sweepd: `max_par = 2` per host, persistent workers whose objective "
          "returns at once; Optuna: `optuna.load_study(storage=\"postgresql+psycopg2://...\")` then `study.optimize"
          "(n_trials=n / processes)` in each process, one trial at a time, stopped after %g s if not done. "
          "Trials/s from `datetime_complete`: `first 1k` = the first 1000 completions, `last 1k` = the last 1000 of the run; "
          "sweepd's 1k and 10k studies are separate runs. CPU per trial: the client side (sweepd daemons and their workers, "
          "or the Optuna processes; `wait4`) and the server's processes (`/proc`); commits and statements per trial as the "
          "server counted them (`pg_stat_database`, `pg_stat_statements`), heartbeats and bookkeeping included." % args["optuna_deadline"], "",
          "| side | processes | n_trials | completed | trials/s whole | trials/s first 1k | trials/s last 1k | CPU ms/trial: client / server | commits / trial | statements / trial | machine busy | load avg, start -> end |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def per(r, key, scale=1.0, digits=1):
        v = r.get(key)
        if v is None or not r["complete"]:
            return "-"
        return f(scale * (sum(v) if isinstance(v, list) else v) / r["complete"], digits)

    for r in raw["sweepd"]:
        L.append("| sweepd | %d x 2 slots | %d | %d | %s | %s | %s | %s / %s | %s | %s | %.0f%% | %s -> %s |" % (
            r["hosts"], r["n"], r["complete"], f(r["rate_whole"]), f(r["rate_first_1k"]), f(r["rate_last_1k"]),
            per(r, "cpu_s_daemons_and_workers", 1e3, 2), per(r, "server_cpu_s", 1e3, 2), per(r, "commits"),
            per(r, "statements"), 100 * r["machine_busy"], f(r["load_start"][0], 2), f(r["load_end"][0], 2)))
    for r in raw["optuna"]:
        L.append("| Optuna | %d | %d | %d%s | %s | %s | %s | %s / %s | %s | %s | %.0f%% | %s -> %s |" % (
            r["procs"], r["n"], r["complete"], "" if r["reached"] else " (stopped at %g s)" % r["deadline_s"],
            f(r["rate_whole"]), f(r["rate_first_1k"]), f(r["rate_last_1k"]),
            per(r, "client_cpu_s", 1e3, 2), per(r, "server_cpu_s", 1e3, 2), per(r, "commits"),
            per(r, "statements"), 100 * r["machine_busy"], f(r["load_start"][0], 2), f(r["load_end"][0], 2)))
    L += ["", "Ratios, sweepd trials/s / Optuna trials/s, same number of processes (goal: >= 20x):", "",
          "| processes | at 1k (sweepd 1k study whole / Optuna first 1k) | at 10k (sweepd 10k study last 1k / Optuna last 1k of its run) |",
          "|---|---|---|"]
    opt = {r["procs"]: r for r in raw["optuna"]}
    for h in sorted({r["hosts"] for r in raw["sweepd"]}):
        s1 = next((r for r in raw["sweepd"] if r["hosts"] == h and r["n"] == min(args["sizes"])), None)
        s10 = next((r for r in raw["sweepd"] if r["hosts"] == h and r["n"] == max(args["sizes"])), None)
        o = opt.get(h)
        if not o:
            continue
        a = s1["rate_whole"] / o["rate_first_1k"] if s1 and s1["rate_whole"] and o["rate_first_1k"] else None
        b = s10["rate_last_1k"] / o["rate_last_1k"] if s10 and s10["rate_last_1k"] and o["rate_last_1k"] else None
        note = "" if o["reached"] else " (Optuna's last 1k ended at trial %d, not %d)" % (o["complete"], o["n"])
        L.append("| %d | %s | %s%s |" % (h, "x" + f(a) if a else "n/a", "x" + f(b) if b else "n/a", note))
    L += ["", "**Reading.** " + reading(raw)]
    return "\n".join(L) + "\n"


def reading(raw):
    """The goals, met or not, from the figures (nothing here is written by hand)."""
    args = raw["args"]
    out = []
    pg = [r for r in raw["coordination"] if r.get("engine") != "sqlite" and r["rate_middle80"]]
    control = next((r for r in raw["coordination"] if r.get("engine") == "sqlite"), None)
    share = {r["hosts"]: r["rate_middle80"] / (r["hosts"] * r["par"] / r["sleep_s"]) for r in pg}
    if share:
        most = max(share)
        line = "Coordination reached %s of the ideal throughput at %s hosts (goal: at least 0.9 at " \
            "%d hosts, **%s**)" % ("/".join("%.3f" % share[h] for h in sorted(share)),
                                   "/".join(str(h) for h in sorted(share)), most,
                                   "met" if share[most] >= 0.9 else "not met")
        if control and control["rate_middle80"]:
            line += ", against %.3f for the same daemon on SQLite, what this machine allows its " \
                "workers and 50 ms sleeps" % (control["rate_middle80"] /
                                             (control["hosts"] * control["par"] / control["sleep_s"]))
        out.append(line + ".")
    opt = {r["procs"]: r for r in raw["optuna"]}
    small, large = min(args["sizes"]), max(args["sizes"])
    x1, x10, flat, cpu, busy = [], [], [], [], []

    def cpu_of(r, keys):
        return sum(sum(v) if isinstance(v, list) else (v or 0.0) for v in (r.get(k) for k in keys))

    for h in sorted({r["hosts"] for r in raw["sweepd"]}):
        s1 = next((r for r in raw["sweepd"] if r["hosts"] == h and r["n"] == small), None)
        s10 = next((r for r in raw["sweepd"] if r["hosts"] == h and r["n"] == large), None)
        o = opt.get(h)
        if o and s1 and s1["rate_whole"] and o["rate_first_1k"]:
            x1.append(s1["rate_whole"] / o["rate_first_1k"])
        if o and s10 and s10["rate_last_1k"] and o["rate_last_1k"]:
            x10.append(s10["rate_last_1k"] / o["rate_last_1k"])
        if s1 and s10 and s1["rate_whole"] and s10["rate_last_1k"]:
            flat.append(s10["rate_last_1k"] / s1["rate_whole"])
        if o and s10 and s10["complete"] and o["complete"]:
            ours = cpu_of(s10, ("cpu_s_daemons_and_workers", "server_cpu_s")) / s10["complete"]
            theirs = cpu_of(o, ("client_cpu_s", "server_cpu_s")) / o["complete"]
            if ours > 0:
                cpu.append((1e3 * ours, 1e3 * theirs))
            busy.append(o["machine_busy"])

    if x1 or x10:
        parts = []
        if x1:
            parts.append("x%s Optuna's throughput at %d trials" % (bl.span(x1, "%.1f"), small))
        if x10:
            parts.append("x%s at %d" % (bl.span(x10, "%.1f"), large))
        every = x1 + x10
        out.append("With 1 to %d processes a side, sweepd ran %s (goal: at least x20, **%s**)." % (
            max(opt) if opt else 1, " and ".join(parts),
            "met" if every and min(every) >= 20 else "not met"))
    if flat:
        out.append("sweepd's throughput over the last 1000 trials of a %d-trial study was %s of a %d-trial "
                   "study's (%s)." % (large, bl.span(flat), small,
                                      "flat" if min(flat) >= 0.8 else "not flat"))
    if cpu:
        line = "A trial cost %s ms of CPU, client and server, against Optuna's %s" % (
            bl.span([c[0] for c in cpu]), bl.span([c[1] for c in cpu]))
        if busy and max(busy) >= 0.9:
            line += ("; Optuna kept the cores up to %.0f%% busy, so that ratio, not sweepd's own "
                     "speed, bounds the throughput ratio here" % (100 * max(busy)))
        out.append(line + ".")
    out.append("The machine is shared with other work whose load moves from minute to minute (the "
               "load columns): compare the figures of one row before those of different runs.")
    return " ".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="ideal run time of each coordination run")
    ap.add_argument("--hosts", default="1,2,4")
    ap.add_argument("--sizes", default="1000,10000", help="sweepd study sizes of the per-trial runs")
    ap.add_argument("--optuna-trials", type=int, default=10000)
    ap.add_argument("--optuna-deadline", type=float, default=300.0)
    ap.add_argument("--skip-optuna", action="store_true")
    ap.add_argument("--only-coordination", action="store_true",
                    help="measure the coordination runs alone (with their SQLite control), print the statements "
                         "per trial; leaves the doc alone")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--target-dir", default=None)
    ap.add_argument("--no-doc", action="store_true")
    ap.add_argument("--render", action="store_true",
                    help="rewrite the doc section from target/bench/%s (no measuring)" % RAW)
    args = ap.parse_args()
    if args.render:
        bl.publish("postgres", render(bl.load_raw(RAW)), args.no_doc)
        return
    hosts = [int(x) for x in args.hosts.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    source = bl.source_state()
    bl.cargo_build(args, ["--bin", "sweepd"])
    sweepd = bl.target_dir(args) / "release" / "sweepd"
    info = dict(bl.machine_info(), commit=source, uname=" ".join(os.uname()))
    t0 = time.time()
    workdir = tempfile.mkdtemp(prefix="sweepd-pgbench-runs-", dir=args.workdir)
    cluster = Cluster(args.workdir)
    info["postgres"] = cluster.version
    raw = {"info": info, "command": " ".join([Path(sys.argv[0]).name] + sys.argv[1:]) or "postgres_bench.py",
           "args": {"seconds": args.seconds, "sizes": sizes, "optuna_deadline": args.optuna_deadline,
                    "optuna_trials": args.optuna_trials},
           "coordination": [], "sweepd": [], "optuna": []}
    try:
        for h in hosts:
            n = int(round(h * 2 / 0.05 * args.seconds))
            log("coordination: %d host(s) x 2 slots, %d trials of 50 ms" % (h, n))
            r = run_daemons(sweepd, cluster, workdir, "coord%d" % h, h, 2, n, 0.05)
            log("  %.1f trials/s (middle 80%%), ideal %.0f" % (r["rate_middle80"] or 0, h * 40))
            raw["coordination"].append(r)
        n = int(round(2 / 0.05 * args.seconds))
        log("coordination control: 1 host x 2 slots on SQLite, %d trials of 50 ms" % n)
        r = run_daemons(sweepd, cluster, workdir, "coord_sqlite", 1, 2, n, 0.05, sqlite=True)
        log("  %.1f trials/s (middle 80%%), ideal 40" % (r["rate_middle80"] or 0))
        raw["coordination"].append(r)
        if args.only_coordination:
            log("SQLite control: median trial %.1f ms" % (1000 * (r["trial_span_median_s"] or 0)))
            for r in raw["coordination"]:
                if r["engine"] != "postgres":
                    continue
                k = max(r["complete"], 1)
                log("%d host(s): %.3f of ideal, %s commits and %s statements per trial, CPU ms/trial %.2f "
                    "(daemons + workers) / %.2f (server), median trial %.1f ms, machine busy %.0f%%, load %.1f -> %.1f; "
                    "by statement:"
                    % (r["hosts"], (r["rate_middle80"] or 0) / (r["hosts"] * 40),
                       f(r["commits"] / k, 2), f((r["statements"] or 0) / k, 2),
                       1000 * sum(r["cpu_s_daemons_and_workers"]) / k, 1000 * (r["server_cpu_s"] or 0) / k,
                       1000 * (r["trial_span_median_s"] or 0), 100 * (r["machine_busy"] or 0), r["load_start"][0], r["load_end"][0]))
                for q, c, t in r["statement_calls"]:
                    if c >= r["complete"] / 50:
                        log("  %7.3f x %6.3f ms  %s" % (c / k, t / max(c, 1), " ".join(q.split())[:150]))
            return
        for h in hosts:
            for n in sizes:
                log("sweepd: %d host(s) x 2 slots, %d instant trials" % (h, n))
                r = run_daemons(sweepd, cluster, workdir, "cost%d_%d" % (h, n), h, 2, n, 0)
                log("  %.1f trials/s whole" % (r["rate_whole"] or 0))
                raw["sweepd"].append(r)
        if not args.skip_optuna:
            for h in hosts:
                log("Optuna: %d process(es), up to %d trials or %.0f s" % (h, args.optuna_trials, args.optuna_deadline))
                r = run_optuna(cluster, "optuna%d" % h, h, args.optuna_trials, args.optuna_deadline)
                log("  %d trials, %.1f trials/s whole" % (r["complete"], r["rate_whole"] or 0))
                raw["optuna"].append(r)
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    raw["total_s"] = time.time() - t0
    raw["load_end"] = os.getloadavg()
    bl.save_raw(RAW, raw)
    bl.publish("postgres", render(raw), args.no_doc)


if __name__ == "__main__":
    main()
