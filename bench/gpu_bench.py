#!/usr/bin/env python3
"""GPU benchmarks of sweepd on the simulated GPU (no NVIDIA hardware needed).

Run by ``make bench`` (which first builds target/release/sweepd and the fake
libnvidia-ml).  Every study runs the real release daemon against the fake NVML
(``fake-nvml/fake_nvml.c``, state file in ``$FAKE_NVML_STATE``) with a
simulated worker that allocates in that state and raises PyTorch's real OOM
error when the card is full: packing with ``tests/workers/torch_sim_worker.py``
on the stand-in PyTorch (``tests/standin/torch``), whose allocator sweepd's
helper caps, so a trial past its cap fails alone, as ``cap``; fragmentation with
``tests/workers/gpu_sim_worker.py``.

Benchmarks (each writes its section of docs/benchmarks.md between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` markers, and its raw
results to ``target/bench/gpu_bench-NAME.json``):

* packing:       workloads of mixed sizes on one 24 GiB card (a foreign process,
                 a container's PIDs, memory beyond the measured range, two
                 daemons), sweepd's GPU admission against an oracle, its
                 bounds and fixed PAR=3 and PAR=4 baselines; collateral OOMs
                 and the seconds capped attempts cost.
* fragmentation: one persistent worker whose reserved-but-unallocated memory
                 grows every trial, with and without recycling.

Usage: .venv/bin/python bench/gpu_bench.py [--only packing|fragmentation] [--no-docs]
       .venv/bin/python bench/gpu_bench.py --render [--only ...]   # rewrite from the raw results
The packing benchmark enqueues its trials through Optuna (the venv's); the rest is stdlib.
"""

import argparse
import collections
import datetime
import json
import math
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

REPO = str(bl.ROOT)
# SWEEPD_BIN: another build to measure side by side with this one (A/B on the same machine).
SWEEPD = os.environ.get("SWEEPD_BIN") or os.path.join(REPO, "target", "release", "sweepd")
FAKE_NVML = os.path.join(REPO, "target", "fake-nvml", "libnvidia-ml.so.1")
WORKER = os.path.join(REPO, "tests", "workers", "gpu_sim_worker.py")
# The packing bench's worker: the stand-in PyTorch's, which sweepd's helper caps.
TORCH_WORKER = os.path.join(REPO, "tests", "workers", "torch_sim_worker.py")
PYTHON = sys.executable or "python3"

GIB = bl.GIB
RUN_LIMIT_S = 240  # hang guard per study

# The fake NVML state file is parsed exactly as the simulated worker parses it.
sys.path.insert(0, os.path.join(REPO, "tests", "workers"))
from gpu_sim_worker import parse_size, read_state  # noqa: E402




def toml_str(s):
    return json.dumps(str(s))


def study_toml(name, n_trials, max_par, env, params, gpu, retry, worker_extra="", seed=7,
               worker=WORKER):
    """A supervisor.toml; `gpu` and `retry` are dicts of already-TOML-encoded values."""
    lines = [
        "[study]",
        "name = %s" % toml_str(name),
        'direction = "minimize"',
        'sampler = "random"',
        "seed = %d" % seed,
        "n_trials = %d" % n_trials,
        "",
        "[storage]",
        'url = "sqlite:///study.db"',
        "",
        "[worker]",
        "command = [%s, %s]" % (toml_str(PYTHON), toml_str(worker)),
        'mode = "persistent"',
        "max_par = %d" % max_par,
        'shutdown_grace = "5s"',
        'log_dir = "logs"',
    ]
    if worker_extra:
        lines.append(worker_extra)
    lines += ["", "[worker.env]"]
    lines += ["%s = %s" % (k, toml_str(v)) for k, v in env.items()]
    lines += ["", params.strip(), "", "[gpu]"]
    lines += ["%s = %s" % kv for kv in gpu.items()]
    lines += ["", "[retry]"]
    lines += ["%s = %s" % kv for kv in retry.items()]
    return "\n".join(lines) + "\n"




class Run(object):
    """One `sweepd run` to its end in a fresh study directory on a fresh fake card."""

    def __init__(self, label, toml, card="24G Fake 24GB card"):
        self.label = label
        self.dir = tempfile.mkdtemp(prefix="sweepd-gpubench-")
        self.config = os.path.join(self.dir, "supervisor.toml")
        self.state = os.path.join(self.dir, "nvml.state")
        self.db = os.path.join(self.dir, "study.db")
        with open(self.config, "w") as f:
            f.write(toml)
        with open(self.state, "w") as f:
            f.write("prune_dead_pids\ngpu 0 %s\n" % card)
        self.env = dict(os.environ, SWEEPD_NVML_LIB=FAKE_NVML, FAKE_NVML_STATE=self.state,
                        SWEEPD_LOG="info")
        self.wall = None

    def sweepd(self, *args):
        out = subprocess.run([SWEEPD] + list(args) + ["-c", self.config], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        if out.returncode != 0:
            raise RuntimeError("sweepd %s failed (%d):\n%s" % (" ".join(args), out.returncode,
                                                               out.stderr))
        return out.stdout

    def run(self):
        self.sweepd("check")
        with open(os.path.join(self.dir, "sweepd.stderr"), "w") as err:
            start = time.monotonic()
            proc = subprocess.Popen([SWEEPD, "run", "-c", self.config], env=self.env,
                                    stdout=subprocess.DEVNULL, stderr=err)
            try:
                rc = proc.wait(timeout=RUN_LIMIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = "killed after %ds" % RUN_LIMIT_S
            self.wall = time.monotonic() - start
        if rc != 0:
            with open(os.path.join(self.dir, "sweepd.stderr")) as f:
                tail = f.read()[-4000:]
            raise RuntimeError("%s: sweepd run exited %s; study dir %s\n%s"
                               % (self.label, rc, self.dir, tail))
        self.trials = json.loads(self.sweepd("trials", "--json"))
        return self

    def count(self, state):
        return sum(1 for t in self.trials if t.get("state") == state)

    def ooms(self):
        return [t for t in self.trials if t.get("fail_kind") == "oom"]

    def first_oom(self):
        numbers = [t["number"] for t in self.ooms()]
        return min(numbers) if numbers else None

    def sql(self, query):
        conn = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True)
        try:
            return conn.execute(query).fetchall()
        finally:
            conn.close()

    def cleanup(self):
        shutil.rmtree(self.dir, ignore_errors=True)




def parse_time(s):
    s = s.replace("T", " ").rstrip("Z")
    for fmt in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S"):
        try:
            return datetime.datetime.strptime(s, fmt).timestamp()
        except ValueError:
            pass
    raise ValueError("unknown time format: %r" % s)




def table(header, rows):
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    out = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    for r in cells[1:]:
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
    return "\n".join(out)


def ordinal(n):
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return "%d%s" % (n, suffix)


def human(size):
    b = parse_size(size)
    for unit, mult in (("GiB", GIB), ("MiB", 1 << 20)):
        if b >= mult:
            return ("%.1f %s" % (b / mult, unit)).replace(".0 ", " ")
    return "%d B" % b


_MEASURED = []


def measured_binary():
    """The label of the binary measured: the tree's commit as it was when the bench started
    (src/ may change while a run of several minutes goes on; the binary does not), or the
    other build's path."""
    if not _MEASURED:
        _MEASURED.append("%s (SWEEPD_BIN)" % SWEEPD if os.environ.get("SWEEPD_BIN")
                         else bl.source_state())
    return _MEASURED[0]


def setup_lines(raw, what):
    return bl.machine_lines(raw["info"], raw["load_end"], "other work on the machine slows the "
                            "wall-clock figures") + [
        "- Command: `make bench` (runs `.venv/bin/python bench/gpu_bench.py`); raw results: "
        "`target/bench/gpu_bench-%s.json`" % what,
        "- Runtime of this section: %.0f s" % raw["elapsed"],
    ]


# ------------------------------------------------------------------------------------------------
# Benchmark 1: packing, against an oracle
# ------------------------------------------------------------------------------------------------
# The same trials (drawn with a seed and enqueued before each run, `Daemon.enqueue`) run by
# sweepd with its default [gpu] settings, by fixed PAR=3 and PAR=4, and scheduled by an oracle
# (`benchlib.oracle`) that knows every trial's peak and duration in advance. Trial lengths are
# scaled down from the 1.5-5 s and 5-15 s so that the whole `make bench` stays well
# inside 15 minutes on a 2-core machine.
PACK_CARD = 24 * GIB
# The first study's seed (a second study's is the next): which trials every run of a workload runs.
PACK_SEED = 7
PACK_CONTEXT = "500M"
PACK_MAX_PAR = 8
# Trial lengths are multiplied by this (`--scale`): 3 gives the issue's own lengths.
PACK_SCALE = 1.0
PACK_LENGTHS = [
    # (name, trials per study, ramp s, hold range s)
    ("short", 40, 0.2, (0.4, 1.3)),
    ("long", 30, 0.5, (1.5, 4.5)),
]
# The worker is tests/workers/torch_sim_worker.py on the stand-in PyTorch: sweepd's helper caps
# its caching allocator, and a trial past its cap fails with PyTorch's text, as `cap`. Its
# context appears at its first trial; new memory comes in the stand-in allocator's segments.
PACK_ENV = {"FAKE_TORCH_CONTEXT": PACK_CONTEXT, "SIM_STEPS": "5", "SIM_MEM_NOISE": "0.02"}
BIMODAL_PARAMS = """
[params.mem]
type = "categorical"
choices = [2048, 6144]

[params.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true
"""
CONTINUOUS_PARAMS = """
[params.width]
type = "int"
low = 64
high = 1024
log = true

[params.depth]
type = "int"
low = 1
high = 8

[params.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true
"""
# Peak = context + 512 MiB + 2 MiB x width x depth: 0.6 to 16.5 GiB, about 3.5 GiB on average.
CONTINUOUS_ENV = {"SIM_MEM_PRODUCT": "width,depth", "SIM_MEM_UNIT": "2M",
                  "SIM_MEM_BASE": "512M"}
# Peak = context + 512 MiB + 1 MiB x a^2 x b, 0.5 to 16.5 GiB; `c` has no effect. The first
# third of the enqueued trials take only the two smallest `b` (BEYOND_EARLY), the rest any:
# the later trials' memory lies beyond what the first ones measured.
BEYOND_PARAMS = """
[params.a]
type = "int"
low = 1
high = 8

[params.b]
type = "categorical"
choices = [16, 32, 64, 128, 256]

[params.c]
type = "float"
low = 0.0
high = 1.0
"""
BEYOND_ENV = {"SIM_MEM_PRODUCT": "a^2,b", "SIM_MEM_UNIT": "1M", "SIM_MEM_BASE": "512M"}
BEYOND_EARLY = {"b": [16, 32]}
# NVML lists every process under its pid + this, as under a container's PID namespace.
CONTAINER_PID_OFFSET = 100000
FOREIGN_SIZE = 6 * GIB
NO_BREAKER = {"oom": "0", "breaker_threshold": "1000"}


def drawn_params(space, n, seed, early=None):
    """`n` param sets drawn from `space` (a config's `[params]` table) with a generator seeded
    by `seed`: the trials of every run of a workload, whatever the scheduler. `early`: {name:
    choices} the first third of the trials draw that categorical from instead."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        trial = {}
        for name, spec in space.items():
            kind = spec["type"]
            if kind == "categorical":
                choices = (early or {}).get(name) if i < n // 3 else None
                trial[name] = rng.choice(choices or spec["choices"])
            elif kind == "int" and spec.get("log"):
                lo, hi = math.log(spec["low"] - 0.5), math.log(spec["high"] + 0.5)
                trial[name] = min(spec["high"], max(spec["low"],
                                                    round(math.exp(rng.uniform(lo, hi)))))
            elif kind == "int":
                trial[name] = rng.randint(spec["low"], spec["high"])
            elif spec.get("log"):
                trial[name] = math.exp(rng.uniform(math.log(spec["low"]), math.log(spec["high"])))
            else:
                trial[name] = rng.uniform(spec["low"], spec["high"])
        out.append(trial)
    return out


class Daemon(object):
    """One study directory, config and `sweepd run` of a packing run. Its trials are enqueued
    before the run (Optuna's `enqueue_trial`, read by sweepd as a user's enqueued trials), so
    that every run of a workload, sweepd's and fixed PAR's, of any build, runs the same trials
    under the same numbers. Left to the sampler, the set was not the same: sweepd's admission
    line draws candidates ahead and leaves those it has not started when the budget is spent,
    so its trials, and which number each had, depended on when admissions asked."""

    def __init__(self, root, name, toml, early=None):
        self.name = name
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.config = os.path.join(self.dir, "supervisor.toml")
        self.db = os.path.join(self.dir, "study.db")
        self.record = os.path.join(self.dir, "record")
        with open(self.config, "w") as f:
            f.write(toml.replace("@RECORD@", self.record))
        self.trials = []
        self.enqueue(tomllib.loads(toml), early)

    def enqueue(self, config, early):
        import optuna  # only here: the fragmentation benchmark needs none of it

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = config["study"]
        created = optuna.create_study(storage="sqlite:///" + self.db, study_name=study["name"],
                                      direction=study["direction"])
        for params in drawn_params(config["params"], study["n_trials"], study["seed"], early):
            created.enqueue_trial(params)
        # Created under the default umask; sweepd (rightly) warns of a database others can read.
        for path in (self.db, self.db + "-wal", self.db + "-shm"):
            if os.path.exists(path):
                os.chmod(path, 0o640)

    def sql(self, query):
        conn = sqlite3.connect("file:%s?mode=ro" % self.db, uri=True)
        try:
            return conn.execute(query).fetchall()
        finally:
            conn.close()

    def records(self):
        """{trial number: (peak bytes, seconds, complete)} of the trials the simulator ran
        (`benchlib.records_in`)."""
        return bl.records_in(self.record)

    def copies(self):
        """{copy's number: the number of the trial it re-runs}: sweepd re-runs a failed trial
        (at its cap, after an OOM another process caused) as a WAITING copy under a new number,
        marked with Optuna's `failed_trial` system attribute."""
        # Not read-only: the daemon has exited, and a read-only open of a WAL database whose
        # -shm file is gone fails.
        conn = sqlite3.connect(self.db, timeout=30)
        try:
            rows = conn.execute("SELECT t.number, a.value_json FROM trials t JOIN "
                                "trial_system_attributes a ON a.trial_id = t.trial_id "
                                "WHERE a.key = 'failed_trial'").fetchall()
        finally:
            conn.close()
        return {n: int(json.loads(v)) for n, v in rows}


class PackRun(object):
    """Daemons started together on one fresh fake card, sharing its ledger; optionally a
    foreign process that takes memory mid-run."""

    def __init__(self, label, tomls, foreign_after=None, state="", early=None):
        self.label = label
        self.root = tempfile.mkdtemp(prefix="sweepd-pack-")
        self.state = os.path.join(self.root, "nvml.state")
        with open(self.state, "w") as f:
            f.write("prune_dead_pids\ngpu 0 24G Fake 24GB card\n%s" % state)
        self.daemons = [Daemon(self.root, "study%d" % i, t, early) for i, t in enumerate(tomls)]
        self.env = dict(os.environ, SWEEPD_NVML_LIB=FAKE_NVML, FAKE_NVML_STATE=self.state,
                        SWEEPD_LEDGER=os.path.join(self.root, "gpu-ledger"), SWEEPD_LOG="info")
        self.foreign_after = foreign_after
        self.foreign = None  # (seconds after the first trial start, bytes)
        self.stopped = None  # when the hang guard stopped the daemons (epoch seconds)

    def stop(self, procs):
        """The hang guard: RUN_LIMIT_S passed with trials left. Every daemon is stopped as a
        person would (SIGINT, then SIGKILL after 30 s) and the run's figures count up to then:
        its makespan is at least that long, its ratio to the oracle at most what it shows."""
        print("  %s: still running after %d s: stopped" % (self.label, RUN_LIMIT_S), flush=True)
        self.stopped = time.time()
        for p, _ in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p, _ in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return 0

    def run(self):
        procs = []
        for d in self.daemons:
            err = open(os.path.join(d.dir, "sweepd.stderr"), "w")
            procs.append((subprocess.Popen([SWEEPD, "run", "-c", d.config], env=self.env,
                                           stdout=subprocess.DEVNULL, stderr=err), err))
        holder = None
        try:
            if self.foreign_after is not None:
                time.sleep(self.foreign_after)
                # Someone else's job asks for memory that is free at that moment (a real
                # allocation can take no more), up to FOREIGN_SIZE, and keeps it to the end.
                totals, procs_now = read_state(self.state)
                free = PACK_CARD - sum(v for (i, _), v in procs_now.items() if i == 0)
                size = max(0, min(FOREIGN_SIZE, free - 256 * (1 << 20)))
                holder = subprocess.Popen(["sleep", "3600"])
                with open(self.state, "a") as f:
                    f.write("proc 0 %d %d\n" % (holder.pid, size))
                self.foreign = (time.time(), size)
            deadline = time.monotonic() + RUN_LIMIT_S
            for p, err in procs:
                try:
                    rc = p.wait(timeout=max(deadline - time.monotonic(), 0))
                except subprocess.TimeoutExpired:
                    rc = self.stop(procs)
                err.close()
                if rc != 0 and self.stopped is None:
                    raise RuntimeError("%s: sweepd exited %s; see %s" % (self.label, rc, self.root))
        finally:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
            if holder is not None:
                holder.kill()
                holder.wait()
        for d in self.daemons:
            out = subprocess.run([SWEEPD, "trials", "--json", "-c", d.config], env=self.env,
                                 stdout=subprocess.PIPE, universal_newlines=True, check=True)
            d.trials = json.loads(out.stdout)
        if self.foreign is not None:
            first = min(parse_time(t["datetime_start"]) for d in self.daemons
                        for t in d.trials if t.get("datetime_start"))
            self.foreign = (self.foreign[0] - first, self.foreign[1])
        return self

    def trials(self):
        return [t for d in self.daemons for t in d.trials]

    def makespan(self):
        ts = [t for t in self.trials() if t.get("datetime_start") and t.get("datetime_complete")]
        end = max(parse_time(t["datetime_complete"]) for t in ts)
        return (max(end, self.stopped or end) - min(parse_time(t["datetime_start"]) for t in ts))

    def mean_parallel(self):
        busy = sum(parse_time(t["datetime_complete"]) - parse_time(t["datetime_start"])
                   for t in self.trials() if t.get("datetime_start") and t.get("datetime_complete"))
        return busy / self.makespan()

    def oom_trials(self):
        return [t for t in self.trials() if t.get("fail_kind") == "oom"]

    def ooms(self):
        return len(self.oom_trials())

    def ooms_within_estimate(self):
        """OOMs whose message shows the trial within what it was admitted with: the memory
        counted for it was held by other processes (the foreign one, a trial beyond its own
        estimate): collateral OOMs."""
        return len(bl.collateral_ooms(self.trials()))

    def caps(self):
        """The figures of issue 41's goal: collateral OOMs, attempts that failed at their own
        cap (each re-run), and the share of trial-seconds those attempts took."""
        lost, total = bl.seconds_lost_to_caps(self.trials())
        return {"collateral": self.ooms_within_estimate(),
                "capped": sum(1 for t in self.trials() if t.get("fail_kind") == "cap"),
                "capped_s": lost, "trial_s": total}

    def cleanup(self):
        if os.environ.get("GPU_BENCH_KEEP"):
            print("  kept %s" % self.root)
            return
        shutil.rmtree(self.root, ignore_errors=True)


def jobs_of(runs):
    """Every trial's (peak, seconds) by trial number, per study, from the simulator's records of
    the runs (the same trials in each: a trial that failed in one run, at its cap or of an OOM,
    counts as an attempt of it completed, in that run as a re-run under another number or in
    another run; `benchlib.merge_attempts`)."""
    return [bl.merge_attempts([(r.daemons[i].records(), r.daemons[i].copies()) for r in runs])
            for i in range(len(runs[0].daemons))]


def pack_toml(name, n, max_par, env, params, gpu, seed=7):
    return study_toml(name, n, max_par, env, params, gpu, NO_BREAKER, seed=seed,
                      worker=TORCH_WORKER)


# The workloads the goal is judged on run every `[gpu]` key at its default; these set one.
NOT_DEFAULT = ("group",)
# A packing workload: `studies` daemons share the card; `foreign`: a foreign process takes
# memory mid-run; `gpu`: extra `[gpu]` keys; `state`: extra fake NVML directives; `early`:
# `drawn_params`'s choices for the first third of the trials.
Workload = collections.namedtuple("Workload", "key title params env studies foreign gpu state "
                                  "early")


def packing_workloads():
    def w(key, title, params, env, studies=1, foreign=False, gpu=None, state="", early=None):
        return Workload(key, title, params, env, studies, foreign, gpu or {}, state, early)
    return [
        w("bimodal", "`bimodal`: `mem` 2 or 6 GiB, `lr` of no effect", BIMODAL_PARAMS, {}),
        w("continuous", "`continuous`: the peak from `width` x `depth`, 1 to 17 GiB",
          CONTINUOUS_PARAMS, CONTINUOUS_ENV),
        w("foreign", "`foreign`: continuous, and a foreign process takes up to 6 GiB mid-run",
          CONTINUOUS_PARAMS, CONTINUOUS_ENV, foreign=True),
        w("container", "`container`: continuous, with NVML listing every process under its pid "
          "+ %d (`pid_offset`, a container's PID namespace): sweepd attributes memory from the "
          "frameworks' reports" % CONTAINER_PID_OFFSET, CONTINUOUS_PARAMS, CONTINUOUS_ENV,
          state="pid_offset %d\n" % CONTAINER_PID_OFFSET),
        w("beyond", "`beyond`: the peak from 1 MiB x `a`^2 x `b` (`a` 1 to 8, `b` one of 16 to "
          "256), 1 to 17 GiB, `c` of no effect; the first third of the trials take `b` 16 or 32 "
          "only, the later ones any", BEYOND_PARAMS, BEYOND_ENV, early=BEYOND_EARLY),
        w("two", "`two`: continuous, two daemons (two studies, half the trials each)",
          CONTINUOUS_PARAMS, CONTINUOUS_ENV, studies=2),
        w("group", "`group`: the same two with `[gpu] memory_group = \"sim\"` in both (each learns "
          "from the other's peaks too; not the defaults, so not judged against the goal)",
          CONTINUOUS_PARAMS, CONTINUOUS_ENV, studies=2, gpu={"memory_group": '"sim"'}),
    ]


# Longer runs (sweepd only): users run hundreds to thousands of trials, where the model's first
# trials (admitted at `trial_memory`, wide bounds) are a small share of the run.
LONG_RUN_TRIALS = 120
LONG_RUN_LENGTH = "short"
# Issue 41's goal: of the oracle's throughput at least GOAL_RATIO at 40 trials (the lengths'
# own runs) and GOAL_RATIO_LONG at LONG_RUN_TRIALS; no collateral OOM; at most GOAL_LOST of the
# trial-seconds lost to attempts that failed at their cap.
GOAL_RATIO, GOAL_RATIO_LONG, GOAL_LOST = 0.9, 0.95, 0.03


def packing(only_workload=None, only_length=None, trials=None, baselines=True):
    """Measures the packing section: its raw results (`render_packing` writes the text)."""
    info = dict(bl.machine_info(), commit=measured_binary())
    t0 = time.monotonic()
    internals = bl.internals(SWEEPD)
    results = measure_packing(internals, only_workload, only_length, trials, baselines)
    # The longer runs only with the whole section (the options above measure one thing).
    long_results = []
    if not (only_workload or only_length or trials or not baselines):
        long_results = measure_packing(internals, None, LONG_RUN_LENGTH, LONG_RUN_TRIALS, False)
    return {"info": info, "load_end": os.getloadavg(), "elapsed": time.monotonic() - t0,
            "internals": internals, "seed": PACK_SEED, "scale": PACK_SCALE,
            "baselines": baselines, "lengths": scaled_lengths(), "max_par": PACK_MAX_PAR,
            "results": results, "long_trials": LONG_RUN_TRIALS, "long_results": long_results}


def scaled_lengths():
    """[(name, trials, ramp s, (hold from, to) s)] at this run's `--scale`."""
    return [(name, n, ramp * PACK_SCALE, (lo * PACK_SCALE, hi * PACK_SCALE))
            for name, n, ramp, (lo, hi) in PACK_LENGTHS]


def learner_rule(internals):
    """sweepd's rule for a study's first trials (`src/gpu/memory_model/mod.rs`): until
    `MIN_MEASURED` have been measured, each is expected at `trial_memory` x `PRIOR_MARGIN`.
    Returns (k, margin, prior bytes, headroom bytes) at the defaults."""
    k = bl.internal(internals, "consts.MIN_MEASURED")
    margin = bl.internal(internals, "consts.PRIOR_MARGIN")
    prior = int(bl.internal(internals, "defaults.gpu.trial_memory") * margin)
    return k, margin, prior, bl.internal(internals, "defaults.gpu.headroom")


def caps_rule(internals):
    """The caps bound's start of a study: its first `MIN_MEASURED` trials at the small prior
    (`BOLD_PRIOR_SHARE` x `trial_memory`, `src/gpu/memory_model/tuning.rs`). The daemon admits
    the very first wave at the bound, before any worker has said it enforces its cap: the bound
    leaves that out, so it is a little above what the design can reach. Returns (k, share, prior
    bytes)."""
    share = bl.internal(internals, "consts.BOLD_PRIOR_SHARE")
    return (bl.internal(internals, "consts.MIN_MEASURED"), share,
            int(bl.internal(internals, "defaults.gpu.trial_memory") * share))


def workload_configs(w, key_env, n, baselines):
    """[(label, [one supervisor.toml per daemon])]: sweepd's, then fixed PAR=3 and PAR=4."""
    per = n // w.studies
    configs = [("sweepd", [pack_toml("pack-%s-%d" % (w.key, i), per, PACK_MAX_PAR, key_env,
                                     w.params, dict({"devices": '"all"'}, **w.gpu),
                                     seed=PACK_SEED + i) for i in range(w.studies)])]
    for par in ((3, 4) if baselines else ()):
        # Two daemons share the fixed PAR between them.
        split = [par // w.studies + (1 if i < par % w.studies else 0) for i in range(w.studies)]
        penv = dict(key_env, CUDA_VISIBLE_DEVICES="0")
        configs.append(("PAR=%d" % par, [
            pack_toml("pack-%s-%d" % (w.key, i), per, split[i], penv, w.params,
                      {"devices": '"none"'}, seed=PACK_SEED + i) for i in range(w.studies)]))
    return configs


def measure_packing(internals, only_workload, only_length, trials, baselines):
    """Runs sweepd (and fixed PAR unless not `baselines`) on each workload and length: one
    dict of figures per workload and length."""
    out = []
    for w in packing_workloads():
        if only_workload and w.key != only_workload:
            continue
        for length, n, ramp, (lo, hi) in scaled_lengths():
            if only_length and length != only_length:
                continue
            n = trials or n
            env = dict(PACK_ENV, SIM_RAMP_S=str(ramp), SIM_HOLD_RANGE="%g,%g" % (lo, hi),
                       SIM_RECORD="@RECORD@", **w.env)
            # The foreign process comes a third of the way into an ideal run.
            foreign_after = (n * (ramp + (lo + hi) / 2) / 4.5 / 3 + 1.5) if w.foreign else None
            runs = []
            for label, tomls in workload_configs(w, env, n, baselines):
                print("packing %s/%s: %s ..." % (w.key, length, label), flush=True)
                r = PackRun(label, tomls, foreign_after, w.state, w.early).run()
                print("  makespan %.1f s, %.2f at once, %d OOM, %s; %s" % (
                    r.makespan(), r.mean_parallel(), r.ooms(), r.caps(), collections.Counter(
                        (t["state"], t.get("fail_kind")) for t in r.trials())), flush=True)
                runs.append(r)
            out.append(dict(key=w.key, length=length, **packing_figures(internals, runs, ramp)))
            for r in runs:
                r.cleanup()
    return out


def packing_figures(internals, runs, ramp):
    """The oracle, its bounds, and each run's figures, of the runs of one workload and length
    (sweepd's first)."""
    learn_k, _, prior, headroom = learner_rule(internals)
    caps_k, _, caps_prior = caps_rule(internals)
    sweepd_run, studies = runs[0], len(runs[0].daemons)
    steps = []
    if sweepd_run.foreign is not None:
        at, size = sweepd_run.foreign
        steps = [(at, PACK_CARD - size)]
    # The trials in the order they were numbered, two studies' interleaved.
    per_study = jobs_of(runs)
    order = [(i, k) for k in range(max(len(m) for m in per_study))
             for i, m in enumerate(per_study) if k in m]
    jobs = [per_study[i][k] for i, k in order]
    job_studies = [i for i, _ in order]
    span, opar = bl.oracle(jobs, PACK_MAX_PAR * studies, PACK_CARD, steps)
    # The same oracle told sweepd's estimates instead of the peaks, with sweepd's
    # headroom: how much of the gap the estimates alone explain.
    est = bl.estimates_in([d.dir for d in sweepd_run.daemons])
    est_jobs = [(est.get((i, k), per_study[i][k][0]), per_study[i][k][1]) for i, k in order]
    card = PACK_CARD - headroom
    est_steps = [(a, c - headroom) for a, c in steps]
    est_span, _ = bl.oracle(est_jobs, PACK_MAX_PAR * studies, card, est_steps)
    # The true peaks on the card less sweepd's headroom: what the headroom alone costs.
    hr_span, _ = bl.oracle(jobs, PACK_MAX_PAR * studies, card, est_steps)
    # A learner as good as can be with sweepd's prior and headroom: each study's first
    # trials held at the prior, every later peak known exactly once they have ended.
    learn_span, _ = bl.oracle(jobs, PACK_MAX_PAR * studies, card, est_steps,
                              learn=(job_studies, learn_k, prior))
    # Issue 41's design as good as can be: first trials at the small prior, those above it
    # re-run after their ramp to it, every other peak known.
    caps_span, caps_lost = bl.caps_bound(jobs, PACK_MAX_PAR * studies, card, est_steps,
                                         bl.first_trials(job_studies, caps_k), caps_prior, ramp)
    return {
        "span": span, "at_once": opar, "headroom": span / hr_span, "learner": span / learn_span,
        "caps": span / caps_span, "caps_lost": caps_lost / (caps_lost + sum(d for _, d in jobs)),
        "on_estimates": span / est_span,
        "runs": [dict(label=r.label, makespan=r.makespan(), at_once=r.mean_parallel(),
                      ooms=r.ooms(), stopped=r.stopped is not None, **r.caps()) for r in runs],
        "est_ratios": estimate_ratios(sweepd_run, est),
        "memory_s": memory_seconds(sweepd_run, est),
        "ooms_within": sweepd_run.ooms_within_estimate(),
        "foreign": sweepd_run.foreign,
    }


def estimate_ratios(run, est):
    """Each admitted trial's estimate (`est`, as `bl.estimates_in` reads them) / the peak it
    then had, sorted."""
    ratios = []
    for i, d in enumerate(run.daemons):
        for n, (peak, _, _) in d.records().items():
            if (i, n) in est and peak:
                ratios.append(est[(i, n)] / peak)
    return sorted(ratios)


def memory_seconds(run, est):
    """Where sweepd's card-time went: {"admitted": GiB-s that every attempt held as admitted
    (its estimate, `est`, over its `duration_s`), "failed": those of the attempts that failed,
    "peaks": GiB-s of the completed trials at their peaks}. admitted / peaks over 1 is memory
    held beyond what the trials used: estimates above the peak, capped attempts, their re-runs'
    growth."""
    admitted = failed = peaks = 0.0
    for i, d in enumerate(run.daemons):
        records = d.records()
        for t in d.trials:
            seconds = t.get("duration_s") or 0.0
            held = est.get((i, t["number"]), 0) * seconds / GIB
            admitted += held
            if t.get("state") == "COMPLETE":
                peak, _, _ = records.get(t["number"], (0, 0.0, False))
                peaks += peak * seconds / GIB
            elif t.get("state") == "FAIL":
                failed += held
    return {"admitted": admitted, "failed": failed, "peaks": peaks}


def held_over_peaks(x):
    """sweepd's admitted GiB-s over its completed trials' peak GiB-s (None: not measured)."""
    m = x.get("memory_s")
    return m["admitted"] / m["peaks"] if m and m["peaks"] else None


def lost_share(run):
    """The share of a run's trial-seconds lost to attempts that failed at their cap (0 in a raw
    file written before caps were counted)."""
    return run.get("capped_s", 0.0) / run["trial_s"] if run.get("trial_s") else 0.0


def packing_table(results, baselines):
    head = ["workload", "oracle makespan s", "oracle at once", "oracle with headroom",
            "learner bound", "caps bound", "oracle on estimates",
            "sweepd oracle/sweepd", "sweepd at once", "sweepd OOMs", "collateral OOMs",
            "capped re-runs", "s lost to caps", "held / peak GiB-s"]
    if baselines:
        head += ["PAR=3 oracle/PAR", "PAR=3 at once", "PAR=3 OOMs",
                 "PAR=4 oracle/PAR", "PAR=4 at once", "PAR=4 OOMs"]
    rows = []
    for x in results:
        cells = ["%s (%s)" % (x["key"], x["length"]), "%.1f" % x["span"], "%.2f" % x["at_once"],
                 "%.2f" % x["headroom"], "%.2f" % x["learner"],
                 "%.2f" % x["caps"] if "caps" in x else "-", "%.2f" % x["on_estimates"]]
        for j, r in enumerate(x["runs"]):
            cells += ["%.2f%s" % (x["span"] / r["makespan"], " (stopped)" if r.get("stopped")
                                  else ""), "%.2f" % r["at_once"], str(r["ooms"])]
            if j == 0:
                held = held_over_peaks(x)
                cells += [str(r.get("collateral", x["ooms_within"])), str(r.get("capped", "-")),
                          "%.1f%%" % (100 * lost_share(r)) if "trial_s" in r else "-",
                          "%.2f" % held if held else "-"]
        rows.append(cells)
    return table(head, rows)


def goal_met(results, ratio=GOAL_RATIO):
    """The judged workloads (every `[gpu]` key at its default) and those that met issue 41's
    goal: oracle/sweepd >= `ratio`, no collateral OOM, at most GOAL_LOST of the trial-seconds
    lost to capped attempts."""
    judged = [x for x in results if x["key"] not in NOT_DEFAULT]
    return judged, [x for x in judged
                    if x["span"] / x["runs"][0]["makespan"] >= ratio
                    and not x["runs"][0].get("stopped")
                    and x["runs"][0].get("collateral", x["ooms_within"]) == 0
                    and lost_share(x["runs"][0]) <= GOAL_LOST]


def render_packing(raw):
    """The packing section from the raw results of `packing`."""
    lines = ["## GPU packing: sweepd against an oracle and fixed PAR", ""]
    lines += setup_lines(raw, "packing")
    lines += ["", packing_measured(raw), "", packing_columns(raw), "",
              packing_table(raw["results"], raw["baselines"]), ""]
    if raw["long_results"]:
        lines += [
            "### Longer runs: %d %s trials, sweepd only" % (raw["long_trials"], LONG_RUN_LENGTH),
            "",
            "Users run hundreds to thousands of trials, where a study's first trials are a small "
            "share; the same workloads with %d trials per run (two daemons: %d each), everything "
            "else as above:" % (raw["long_trials"], raw["long_trials"] // 2),
            "",
            packing_table(raw["long_results"], False),
            "",
        ]
    lines.append("**Reading.** " + packing_reading(raw))
    return "\n".join(lines)


def packing_measured(raw):
    """The section's "What is measured" paragraph: the runs, the workloads, the oracle."""
    gpu = bl.internal(raw["internals"], "defaults.gpu")
    (short, n_short, ramp_s, hold_s), (long_, n_long, ramp_l, hold_l) = raw["lengths"][:2]
    return (
        "**What is measured.** The same trials run on one simulated 24 GiB card (the fake NVML "
        "and the simulated worker `tests/workers/torch_sim_worker.py` on the stand-in PyTorch "
        "`tests/standin/torch`, whose caching allocator sweepd's helper caps with "
        "`torch.cuda.set_per_process_memory_fraction` and which fails past its cap with "
        "PyTorch's text: every memory figure is simulated) by sweepd, with `[gpu] devices = "
        "\"all\"` and every other `[gpu]` key at its default (headroom %s, trial_memory %s, "
        "poll_interval %g s, idle_worker_timeout %g s, max_par_per_device %d, caps on) and "
        "`[worker] max_par = %d` per daemon, and by fixed PAR=3 and PAR=4 (`devices = \"none\"`, "
        "`CUDA_VISIBLE_DEVICES=0`, no caps; two daemons split it), every run with `[retry] oom "
        "= 0` (a trial's own OOM is a lost trial; sweepd re-runs, without spending the budget, "
        "a trial that reached its cap and one whose OOM shows other processes held the card), "
        "one run each. The trials are drawn with seed %d (a second study: %d) and enqueued "
        "before each run, so every run of a workload runs the same ones. Workloads: %s. Lengths "
        "(ramp + hold): short %g s + %g-%g s (%d trials), long %g s + %g-%g s (%d trials)%s. The "
        "oracle schedules the same trials in trial-number order with the peaks and durations the "
        "simulator recorded (a trial's completed attempt, a re-run's included), on the whole "
        "card, at most %d at once per study: whenever a trial ends, every waiting trial that "
        "fits for its whole run starts (it knows the foreign process in advance)."
        % (bl.gib(gpu["headroom"]), bl.gib(gpu["trial_memory"]), gpu["poll_interval"],
           gpu["idle_worker_timeout"], gpu["max_par_per_device"], raw["max_par"], raw["seed"],
           raw["seed"] + 1, "; ".join(w.title for w in packing_workloads()), ramp_s, hold_s[0],
           hold_s[1], n_short, ramp_l, hold_l[0], hold_l[1], n_long,
           ", about 3x shorter than the issue's (Decision: \"The packing bench's trials are "
           "about 3x shorter than the issue's\")" if raw["scale"] == 1.0 else
           " (`--scale %g`)" % raw["scale"], raw["max_par"]))


def packing_columns(raw):
    """What the table's columns mean, the bounds' rules from the code's constants."""
    learn_k, margin, prior, _ = learner_rule(raw["internals"])
    caps_k, caps_share, caps_prior = caps_rule(raw["internals"])
    return (
        "**Columns.** `oracle/X` is the oracle's makespan over X's (1.0: the oracle's "
        "throughput) and `at once` trial-seconds over the makespan. As fractions of the oracle's "
        "throughput, `oracle with headroom` is the same oracle on the card less sweepd's "
        "headroom; `learner bound` also holds each study's first %d trials at `trial_memory` x "
        "%g = %s for their whole run and starts its later ones, at their true peaks, only once "
        "those have ended (Decision: \"First trials held at `trial_memory` × 1.15 for their "
        "whole run\" in `docs/decisions.md`): no scheduler that starts a study as the design "
        "before caps did can do better; `caps bound` is the design of issue 41 at its best: on "
        "the card less headroom, each study's first %d trials start at a small prior, %s "
        "(`trial_memory` x %g, the small prior the caps design starts from once a worker has said it "
        "enforces its cap; the daemon's very first wave goes at the bound before that, which this "
        "bound leaves out), one whose peak is above it "
        "holds it for the part of its ramp that reaches it (ramp time x prior / peak), fails at "
        "its cap, and is re-run at its true peak before any later trial, and every other peak is "
        "known exactly from the start; `oracle on estimates` is told the estimates sweepd "
        "admitted each trial with instead of the peaks. Of sweepd's run: `sweepd OOMs` are "
        "trials failed `oom` (a full card, not a cap), `collateral OOMs` those of them whose "
        "reason says the trial was within what it was admitted with and other processes held "
        "the rest of the card (it died because another grew), `capped re-runs` the attempts "
        "that failed at their own cap (`fail_kind = cap`; each is re-run), `s lost to caps` "
        "their seconds, from start to failure, over all the run's trial-seconds (every attempt "
        "of every trial, `duration_s`), and `held / peak GiB-s` the card-time sweepd's attempts "
        "held (each at what it was admitted with, for its `duration_s`) over the card-time its "
        "completed trials used at their peaks: above 1, memory held that no trial used. Issue 41's goal, every workload at the defaults: at "
        "least %g of the oracle's throughput at %d trials and %g at %d, no collateral OOM, at "
        "most %g%% of the trial-seconds lost to caps."
        % (learn_k, margin, bl.gib(prior), caps_k, bl.gib(caps_prior), caps_share,
           GOAL_RATIO,
           raw["lengths"][0][1], GOAL_RATIO_LONG, LONG_RUN_TRIALS, 100 * GOAL_LOST))


def packing_reading(raw):
    """What the figures say, written from them on every run."""
    results = raw["results"]
    if not results:
        return ""
    judged, met = goal_met(results)
    default = judged or results
    ratios = [x["span"] / x["runs"][0]["makespan"] for x in default]
    par_ooms = sum(r["ooms"] for x in results for r in x["runs"][1:])
    ooms = sum(x["runs"][0]["ooms"] for x in default)
    collateral = sum(x["runs"][0].get("collateral", x["ooms_within"]) for x in default)
    lost = [lost_share(x["runs"][0]) for x in default]
    out = ["sweepd reached %s of the oracle's throughput with %d OOM%s (%d collateral)%s, and "
           "lost %s of its trial-seconds to %d capped attempts; the goal, at least %g with no "
           "collateral OOM and at most %g%% lost, is met on %d of %d workloads" % (
               bl.span(ratios), ooms, "" if ooms == 1 else "s", collateral,
               ", where fixed PAR lost %d trials to OOM" % par_ooms if raw["baselines"] else "",
               bl.span([100 * v for v in lost], "%.1f%%"),
               sum(x["runs"][0].get("capped", 0) for x in default), GOAL_RATIO,
               100 * GOAL_LOST, len(met), len(judged))]
    out.append("the oracle keeping sweepd's headroom reaches %s, the learner bound, the best a "
               "scheduler that starts a study as sweepd did before caps can reach, %s" % (
                   bl.span([x["headroom"] for x in default]),
                   bl.span([x["learner"] for x in default])))
    if all("caps" in x for x in default):
        out[-1] += (", and the caps bound, the best of a design that starts a study small and "
                    "pays a wrong guess with the trial's own seconds, %s (losing %s of its "
                    "trial-seconds to capped attempts)" % (
                        bl.span([x["caps"] for x in default]),
                        bl.span([100 * x["caps_lost"] for x in default], "%.1f%%")))
    held = [(held_over_peaks(x), x["memory_s"]) for x in default if held_over_peaks(x)]
    if held:
        out.append("its attempts held %s times the card-time its completed trials used at their "
                   "peaks, %s of it in attempts that failed" % (
                       bl.span([h for h, _ in held]),
                       bl.span([100 * m["failed"] / m["admitted"] for _, m in held], "%.0f%%")))
    long_judged, long_met = goal_met(raw["long_results"], GOAL_RATIO_LONG)
    if long_judged:
        out.append("with %d trials per run sweepd reached %s (the goal, %g, met on %d of %d)"
                   % (raw["long_trials"],
                      bl.span([x["span"] / x["runs"][0]["makespan"] for x in long_judged]),
                      GOAL_RATIO_LONG, len(long_met), len(long_judged)))
    text = "; ".join(out) + ". "
    ratios = {(x["key"], x["length"]): x["est_ratios"] for x in results}
    median = {k: v[len(v) // 2] for k, v in ratios.items() if v}
    under = sum(1 for v in ratios.values() for r in v if r < 1.0)
    repeat = [m for (k, _), m in median.items() if k == "bimodal"]
    never = [m for (k, _), m in median.items() if k != "bimodal"]
    if median:
        text += "The estimates sweepd admitted trials with were a median "
        if repeat:
            text += "%s x the peak where configs repeat (bimodal)%s" % (
                bl.span(repeat), " and " if never else "")
        if never:
            text += "%s x where they never do" % bl.span(never)
        text += "; %d of %d were below the peak. " % (under, sum(len(v) for v in ratios.values()))
    foreign = [x for x in results if x["foreign"]]
    if foreign:
        lost = sum(x["runs"][0]["ooms"] for x in foreign)
        text += "The foreign process took %s" % " and ".join(
            "%s at %.1f s (%s)" % (human(str(x["foreign"][1])), x["foreign"][0], x["length"])
            for x in foreign)
        if lost:
            text += ("; of sweepd's %d OOM%s there, %d came within the trial's estimate, from "
                     "memory the process took from trials sweepd had admitted" % (
                         lost, "" if lost == 1 else "s", sum(x["ooms_within"] for x in foreign)))
        text += (", which no admission rule guards against (Decision: \"No admission rule guards "
                 "against a foreign process: `headroom` does\"). ")
    text += workload_reading(results)
    two = [x for x in results if x["key"] == "two"]
    group = [x for x in results if x["key"] == "group"]
    if two:
        text += ("Two daemons each learn from their own trials only and hold a waiting head for "
                 "each other (Decision: \"A study that runs no trial holds its head at the first "
                 "start another daemon makes past it\")")
        if group:
            text += ("; sharing a `memory_group` took them from %s to %s of the oracle" % (
                "/".join("%.2f" % (x["span"] / x["runs"][0]["makespan"]) for x in two),
                "/".join("%.2f" % (x["span"] / x["runs"][0]["makespan"]) for x in group)))
        text += ". "
    if any(r.get("stopped") for x in results + raw["long_results"] for r in x["runs"]):
        text += ("A run marked `(stopped)` still had trials left after %d s and was stopped "
                 "(SIGINT): its makespan counts to then, so its figure is at most what it shows. "
                 % RUN_LIMIT_S)
    return text + ("Single runs of one build vary by about 0.02 with one daemon, by up to 0.1 "
                   "with two.")


def workload_reading(results):
    """The sentences on issue 41's own workloads, container and beyond, against continuous."""
    def ratio(key):
        xs = [x for x in results if x["key"] == key]
        return "/".join("%.2f" % (x["span"] / x["runs"][0]["makespan"]) for x in xs), xs

    text = ""
    base, _ = ratio("continuous")
    inside, xs = ratio("container")
    if xs:
        text += ("With NVML naming no process of ours (`container`) sweepd reached %s of the "
                 "oracle%s, from what the workers' frameworks report. " % (
                     inside, " (continuous: %s)" % base if base else ""))
    beyond, xs = ratio("beyond")
    if xs:
        text += ("Where later trials' memory lies beyond what the first ones measured (`beyond`) "
                 "it reached %s with %s capped re-run%s and %s collateral OOMs. " % (
                     beyond, "/".join(str(x["runs"][0].get("capped", "-")) for x in xs),
                     "" if sum(x["runs"][0].get("capped", 0) for x in xs) == 1 else "s",
                     "/".join(str(x["runs"][0].get("collateral", x["ooms_within"])) for x in xs)))
    return text


# ------------------------------------------------------------------------------------------------
# Benchmark 2: fragmentation
# ------------------------------------------------------------------------------------------------
FRAG_N = 300
FRAG_PER_TRIAL = "512M"
FRAG_SLOW = "256M"  # a slower leak, at which the seeds' recycle_after = 50 is enough
FRAG_CONTEXT = "500M"
FRAG_PEAK = "4G"
FRAG_ENV = {"SIM_MEM": FRAG_PEAK, "SIM_CONTEXT": FRAG_CONTEXT, "SIM_STEPS": "1",
            "SIM_RAMP_S": "0", "SIM_HOLD_S": "0.02"}
FRAG_PARAMS = """
[params.x]
type = "float"
low = 0.0
high = 1.0
"""


def frag_fits(frag):
    """Trials a fresh worker completes before one OOMs: trial k (0-based) starts from a
    baseline of context + k x frag and fits while that plus the peak is at most 24 GiB."""
    room = 24 * GIB - parse_size(FRAG_CONTEXT) - parse_size(FRAG_PEAK)
    return room // parse_size(frag) + 1


FRAG_VARIANTS = [
    ("none", "no recycling", FRAG_PER_TRIAL, None, {}),
    ("r50", "recycle_after = 50", FRAG_PER_TRIAL, 50, {}),
    ("r10", "recycle_after = 10", FRAG_PER_TRIAL, 10, {}),
    ("exp", "no recycling, SIM_EXPANDABLE_HELPS=1", FRAG_PER_TRIAL, None,
     {"SIM_EXPANDABLE_HELPS": "1"}),
    ("slow_none", "no recycling", FRAG_SLOW, None, {}),
    ("slow50", "recycle_after = 50", FRAG_SLOW, 50, {}),
]


def fragmentation():
    """Measures the fragmentation section: its raw results."""
    info = dict(bl.machine_info(), commit=measured_binary())
    t0 = time.monotonic()
    gpu = {"devices": '"all"', "headroom": '"1GiB"', "trial_memory": '"5GiB"',
           "poll_interval": '"100ms"'}
    res = {}
    for key, label, frag, recycle, extra in FRAG_VARIANTS:
        print("fragmentation: %s, %s/trial ..." % (label, frag), flush=True)
        env = dict(FRAG_ENV, SIM_FRAG_PER_TRIAL=frag, **extra)
        cfg = study_toml("frag", FRAG_N, 1, env, FRAG_PARAMS, gpu, NO_BREAKER,
                         worker_extra="recycle_after = %d" % recycle if recycle else "")
        r = Run(label, cfg).run()
        res[key] = {"label": label, "frag": frag, "complete": r.count("COMPLETE"),
                    "ooms": len(r.ooms()), "first_oom": r.first_oom(),
                    "workers": r.sql("SELECT COUNT(*) FROM sweepd_workers")[0][0], "wall": r.wall}
        print("  %.1f s wall, %d complete, %d oom, %d workers" % (
            r.wall, res[key]["complete"], res[key]["ooms"], res[key]["workers"]), flush=True)
        r.cleanup()
    return {"info": info, "load_end": os.getloadavg(), "elapsed": time.monotonic() - t0,
            "n": FRAG_N, "runs": res}


def render_fragmentation(raw):
    """The fragmentation section from the raw results of `fragmentation`."""
    res = raw["runs"]
    rows = [[x["label"], human(x["frag"]), x["complete"], x["ooms"],
             "-" if x["first_oom"] is None else x["first_oom"], x["workers"],
             max(x["workers"] - 1, 0), "%.1f" % x["wall"]]
            for x in (res[k] for k, *_ in FRAG_VARIANTS if k in res)]
    head = ["run", "frag / trial", "complete", "OOM fails", "first OOM (trial #)",
            "workers spawned", "worker restarts", "wall s"]
    n_fit = frag_fits(FRAG_PER_TRIAL)
    lines = ["## Fragmentation: a persistent worker with and without recycling", ""]
    lines += setup_lines(raw, "fragmentation")
    lines += [
        "",
        "**What is measured.** %d trials per run on one persistent worker (`max_par = 1`), one "
        "simulated 24 GiB card, `[gpu] devices = \"all\"`, `headroom = \"1GiB\"`, `[retry] oom "
        "= 0` and `breaker_threshold = 1000` (no quarantine). Each trial allocates %s on top of "
        "the worker's %s context in one step and frees it after 0.02 s; the simulated caching "
        "allocator then keeps `SIM_FRAG_PER_TRIAL` reserved for good per trial served, so a "
        "fresh worker OOMs on its %s trial at %s per trial and on its %s at %s. sweepd gives "
        "every worker `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`; `SIM_EXPANDABLE_HELPS=1` "
        "has the simulator model that setting as a tenth of the fragmentation, a simulated effect, "
        "not PyTorch's allocator. `first OOM` is the trial number (0-based) of the first "
        "`fail_kind == \"oom\"`, `workers spawned` the rows of `sweepd_workers`, wall time the "
        "whole `sweepd run`."
        % (raw["n"], human(FRAG_PEAK), human(FRAG_CONTEXT), ordinal(n_fit + 1),
           human(FRAG_PER_TRIAL), ordinal(frag_fits(FRAG_SLOW) + 1), human(FRAG_SLOW)),
        "",
        table(head, rows),
        "",
        "**Reading.** " + fragmentation_reading(raw),
    ]
    return "\n".join(lines)


def fragmentation_reading(raw):
    res, n = raw["runs"], raw["n"]
    none, r50, r10 = res["none"], res["r50"], res["r10"]
    n_fit = frag_fits(FRAG_PER_TRIAL)
    if none["ooms"]:
        out = ("Without recycling the worker first ran out of memory on trial %d, its %s, as the "
               "simulated fragmentation predicts, and sweepd replaced it after the OOM, so the run "
               "lost %d of %d trials, one per worker lifetime, where a worker kept alive would "
               "lose every trial from its %s on. " % (
                   none["first_oom"], ordinal(none["first_oom"] + 1), none["ooms"], n,
                   ordinal(n_fit + 1)))
    else:
        out = "Without recycling no trial ran out of memory in %d trials. " % n
    if r50["ooms"]:
        out += ("`recycle_after = 50` counts successful trials and comes too late at %s per trial "
                "(%d OOMs): at this rate the limit must be at most %d. " % (
                    human(FRAG_PER_TRIAL), r50["ooms"], n_fit))
    restarts = max(r10["workers"] - 1, 0)
    extra = r10["wall"] - none["wall"]
    out += ("`recycle_after = 10` ran %d of %d with %d OOMs for %d worker restarts (%+.1f s, "
            "~%.0f ms each with a Python worker that imports nothing heavy; a PyTorch worker pays "
            "seconds of CUDA start-up each). " % (
                r10["complete"], n, r10["ooms"], restarts, extra,
                1000 * extra / restarts if restarts else 0))
    if "slow50" in res:
        out += ("At %s per trial `recycle_after = 50` %s (%d OOMs, against %d without "
                "recycling). " % (human(FRAG_SLOW), "works" if not res["slow50"]["ooms"] else
                                  "is not enough either", res["slow50"]["ooms"],
                                  res["slow_none"]["ooms"]))
    return out + ("The expandable-segments row shows only the simulator's model of that "
                  "setting.")


# ------------------------------------------------------------------------------------------------
SECTIONS = {"packing": render_packing, "fragmentation": render_fragmentation}


def main():
    global PACK_SEED
    global PACK_SCALE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["packing", "fragmentation"])
    ap.add_argument("--no-docs", action="store_true", help="print only; leave docs alone")
    ap.add_argument("--render", action="store_true",
                    help="rewrite the sections from their raw results (target/bench/), no runs")
    ap.add_argument("--workload", help="packing: only this workload (bimodal, continuous, "
                    "foreign, container, beyond, two, group); implies --no-docs")
    ap.add_argument("--length", choices=["short", "long"],
                    help="packing: only this trial length; implies --no-docs")
    ap.add_argument("--trials", type=int, help="packing: trials per run instead of the "
                    "lengths' own (40 short, 30 long); implies --no-docs")
    ap.add_argument("--no-baselines", action="store_true",
                    help="packing: sweepd only, no fixed PAR=3/PAR=4 runs; implies --no-docs")
    ap.add_argument("--seed", type=int,
                    help="packing: draw the trials with this seed instead of %d (another set of "
                    "trials to compare builds on); implies --no-docs" % PACK_SEED)
    ap.add_argument("--scale", type=float,
                    help="packing: multiply every trial's ramp and hold by this (3: about the "
                    "issue's 1.5-5 s and 5-15 s); implies --no-docs")
    args = ap.parse_args()
    names = [args.only] if args.only else list(SECTIONS)
    if args.render:
        for name in names:
            bl.publish(name, SECTIONS[name](bl.load_raw("gpu_bench-%s.json" % name)), args.no_docs)
        return
    if args.seed is not None:
        PACK_SEED = args.seed
    if args.scale is not None:
        if not args.scale > 0:
            sys.exit("gpu_bench: --scale must be above 0, not %g" % args.scale)
        PACK_SCALE = args.scale
    for path, how in ((SWEEPD, "cargo build --release"), (FAKE_NVML, "make fake-nvml")):
        if not os.path.exists(path):
            sys.exit("gpu_bench: %s is missing: run `%s` (or `make bench`)" % (path, how))
    measured_binary()
    t0 = time.monotonic()
    partial = (args.workload or args.length or args.trials or args.no_baselines
               or args.seed is not None or args.scale is not None)
    measure = {"packing": lambda: packing(args.workload, args.length, args.trials,
                                          not args.no_baselines),
               "fragmentation": fragmentation}
    for name in names:
        raw = measure[name]()
        if not partial:
            # A partial run's figures are not the section's: they go to stdout only.
            bl.save_raw("gpu_bench-%s.json" % name, raw)
        bl.publish(name, SECTIONS[name](raw), args.no_docs or partial)
    print("gpu_bench: done in %.0f s%s" % (time.monotonic() - t0,
                                           "" if args.no_docs or partial else "; see docs/benchmarks.md"))


if __name__ == "__main__":
    main()
