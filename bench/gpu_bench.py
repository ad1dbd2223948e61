#!/usr/bin/env python3
"""GPU benchmarks of sweepd on the simulated GPU (no NVIDIA hardware needed).

Run by ``make bench`` (which first builds target/release/sweepd and the fake
libnvidia-ml).  Every study runs the real release daemon against the fake NVML
(``fake-nvml/fake_nvml.c``, state file in ``$FAKE_NVML_STATE``) with the
simulated worker ``tests/workers/gpu_sim_worker.py``, which allocates in that
state and raises PyTorch's real OOM error when the card is full.

Benchmarks (each writes its section of docs/benchmarks.md between
``<!-- bench:NAME -->`` and ``<!-- /bench:NAME -->`` markers and prints its
table to stdout):

* packing:       a mixed small/large workload on one 24 GiB card, with sweepd's
                 GPU admission against fixed PAR=3 and PAR=4 baselines.
* fragmentation: one persistent worker whose reserved-but-unallocated memory
                 grows every trial, with and without recycling.

Usage: .venv/bin/python bench/gpu_bench.py [--only packing|fragmentation] [--no-docs]
The packing benchmark enqueues its trials through Optuna (the venv's); the rest is stdlib.
"""

import argparse
import datetime
import json
import math
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# SWEEPD_BIN: another build to measure side by side with this one (A/B on the same machine).
SWEEPD = os.environ.get("SWEEPD_BIN") or os.path.join(REPO, "target", "release", "sweepd")
FAKE_NVML = os.path.join(REPO, "target", "fake-nvml", "libnvidia-ml.so.1")
WORKER = os.path.join(REPO, "tests", "workers", "gpu_sim_worker.py")
DOC = os.path.join(REPO, "docs", "benchmarks.md")
PYTHON = sys.executable or "python3"

GIB = 1 << 30
# Simulated time: 1 s of wall time stands for 1 simulated minute (x60), so a
# trial of ~0.9 s wall is a ~54 min "training run".
SIM_SCALE = 60.0
SAMPLE_EVERY_S = 0.05
RUN_LIMIT_S = 240  # hang guard per study

DOC_INTRO = """# Benchmarks

Measured figures for sweepd. Each section is written by the script that produced it, between
`<!-- bench:NAME -->` and `<!-- /bench:NAME -->` markers, and is replaced when that script runs
again; `make bench` runs them all.
"""

# The fake NVML state file is parsed exactly as the simulated worker parses it.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "workers"))
from gpu_sim_worker import parse_size, read_state  # noqa: E402


def toml_str(s):
    return json.dumps(str(s))


def study_toml(name, n_trials, max_par, env, params, gpu, retry, worker_extra="", seed=7):
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
        "command = [%s, %s]" % (toml_str(PYTHON), toml_str(WORKER)),
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
        self.samples = []  # (t, used bytes, bytes in trial allocations beyond the context)
        self.wall = None

    def sweepd(self, *args):
        out = subprocess.run([SWEEPD] + list(args) + ["-c", self.config], env=self.env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             universal_newlines=True)
        if out.returncode != 0:
            raise RuntimeError("sweepd %s failed (%d):\n%s" % (" ".join(args), out.returncode,
                                                               out.stderr))
        return out.stdout

    def run(self, context_bytes):
        self.sweepd("check")
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                totals, procs = read_state(self.state)
                used = sum(v for (idx, _), v in procs.items() if idx == 0)
                trial = sum(max(0, v - context_bytes) for (idx, _), v in procs.items()
                            if idx == 0)
                self.samples.append((time.monotonic(), used, trial))
                stop.wait(SAMPLE_EVERY_S)

        with open(os.path.join(self.dir, "sweepd.stderr"), "w") as err:
            start = time.monotonic()
            proc = subprocess.Popen([SWEEPD, "run", "-c", self.config], env=self.env,
                                    stdout=subprocess.DEVNULL, stderr=err)
            sampler = threading.Thread(target=sample)
            sampler.start()
            try:
                rc = proc.wait(timeout=RUN_LIMIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = "killed after %ds" % RUN_LIMIT_S
            self.wall = time.monotonic() - start
            stop.set()
            sampler.join()
        if rc != 0:
            with open(os.path.join(self.dir, "sweepd.stderr")) as f:
                tail = f.read()[-4000:]
            raise RuntimeError("%s: sweepd run exited %s; study dir %s\n%s"
                               % (self.label, rc, self.dir, tail))
        self.trials = json.loads(self.sweepd("trials", "--json"))
        return self

    # -- figures -------------------------------------------------------------------------------
    def count(self, state):
        return sum(1 for t in self.trials if t.get("state") == state)

    def ooms(self):
        return [t for t in self.trials if t.get("fail_kind") == "oom"]

    def first_oom(self):
        numbers = [t["number"] for t in self.ooms()]
        return min(numbers) if numbers else None

    def max_parallel(self):
        edges = []
        for t in self.trials:
            s, e = t.get("datetime_start"), t.get("datetime_complete")
            if s and e:
                edges.append((parse_time(s), 1))
                edges.append((parse_time(e), -1))
        edges.sort()
        cur = best = 0
        for _, d in edges:
            cur += d
            best = max(best, cur)
        return best

    def mean_parallel(self):
        """Trial-seconds run / wall seconds: the time-averaged number of trials running."""
        busy = 0.0
        for t in self.trials:
            a, b = t.get("datetime_start"), t.get("datetime_complete")
            if a and b:
                busy += parse_time(b) - parse_time(a)
        return busy / self.wall if self.wall else 0.0

    def mem_util(self, total):
        """Mean (used, trial-allocated) fraction of the card over the run's samples."""
        if not self.samples:
            return 0.0, 0.0
        return (statistics.mean(s[1] for s in self.samples) / total,
                statistics.mean(s[2] for s in self.samples) / total)

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


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %s, nproc %d" % (platform.machine(), model, os.cpu_count() or 0)


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


def loadavg():
    try:
        return "%.2f/%.2f/%.2f" % os.getloadavg()
    except OSError:
        return "n/a"


def revision():
    """The commit the binary was built from, and whether src/ had uncommitted changes."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              universal_newlines=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "Cargo.toml"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               universal_newlines=True).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + (" with uncommitted changes in src/" if dirty else "")


# The revision as main() found it at the start: src/ may change while a run of several minutes
# goes on, and the binary measured does not (a label read at the end named edits made meanwhile).
STARTED_REVISION = None


def header_lines(started, load_start, load_end):
    return [
        "- Date: %s UTC" % started.strftime("%Y-%m-%d %H:%M"),
        "- Machine: %s" % machine(),
        "- sweepd: %s (release build)" % (STARTED_REVISION or revision()),
        "- Load average (1/5/15 min) at start %s, at end %s: other work on the machine "
        "slows the wall-clock figures" % (load_start, load_end),
        "- Command: `make bench` (runs `.venv/bin/python bench/gpu_bench.py`)",
        "- Setup: the release `sweepd` binary, the fake `libnvidia-ml.so.1` (`fake-nvml/`) and the "
        "simulated worker `tests/workers/gpu_sim_worker.py`; no real GPU. All memory figures are "
        "simulated.",
    ]


# ------------------------------------------------------------------------------------------------
# Benchmark 1: packing, against an oracle
# ------------------------------------------------------------------------------------------------
# The same trials (drawn with a seed and enqueued before each run, `Daemon.enqueue`) run by
# sweepd with its default [gpu] settings, by fixed PAR=3 and PAR=4, and scheduled by an oracle
# that knows every trial's peak and duration in advance. Trial lengths are scaled down from the
# issue's 1.5-5 s and 5-15 s so that the whole `make bench` stays well inside 15 minutes on a
# 2-core machine.
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
# sweepd's own rule for a study's first trials (`src/gpu/memory_model/mod.rs`): until
# MIN_MEASURED have been measured, each is expected at `trial_memory` (6 GiB by default) x
# PRIOR_MARGIN. The learner bound of the table holds them so.
LEARN_K = 3
LEARN_MARGIN = 1.15
LEARN_PRIOR = int(6 * GIB * LEARN_MARGIN)
PACK_ENV = {"SIM_CONTEXT": PACK_CONTEXT, "SIM_LAZY_CONTEXT": "1", "SIM_STEPS": "5",
            "SIM_SEGMENT": "20M", "SIM_MEM_NOISE": "0.02"}
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
FOREIGN_SIZE = 6 * GIB
NO_BREAKER = {"oom": "0", "breaker_threshold": "1000"}


def drawn_params(space, n, seed):
    """`n` param sets drawn from `space` (a config's `[params]` table) with a generator seeded
    by `seed`: the trials of every run of a workload, whatever the scheduler."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        trial = {}
        for name, spec in space.items():
            kind = spec["type"]
            if kind == "categorical":
                trial[name] = rng.choice(spec["choices"])
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

    def __init__(self, root, name, toml):
        self.name = name
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.config = os.path.join(self.dir, "supervisor.toml")
        self.db = os.path.join(self.dir, "study.db")
        self.record = os.path.join(self.dir, "record")
        with open(self.config, "w") as f:
            f.write(toml.replace("@RECORD@", self.record))
        self.trials = []
        self.enqueue(tomllib.loads(toml))

    def enqueue(self, config):
        import optuna  # only here: the fragmentation benchmark needs none of it

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = config["study"]
        created = optuna.create_study(storage="sqlite:///" + self.db, study_name=study["name"],
                                      direction=study["direction"])
        for params in drawn_params(config["params"], study["n_trials"], study["seed"]):
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
        """{trial number: (peak bytes, seconds, complete)} of the trials the simulator ran: as
        they ran where they completed, and as they were drawn where they failed (a trial that
        ran out of memory held less, for less time, than it needed)."""
        return records_in(self.record)


def records_in(path):
    """The simulator's record file at `path` read as `Daemon.records` says."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                w = line.split()
                if w[4] == "complete":
                    out[int(w[1])] = (int(w[2]), float(w[3]), True)
                else:
                    out[int(w[1])] = (int(w[5]), float(w[6]), False)
    except OSError:
        pass
    return out


class PackRun(object):
    """Daemons started together on one fresh fake card, sharing its ledger; optionally a
    foreign process that takes memory mid-run."""

    def __init__(self, label, tomls, foreign_after=None):
        self.label = label
        self.root = tempfile.mkdtemp(prefix="sweepd-pack-")
        self.state = os.path.join(self.root, "nvml.state")
        with open(self.state, "w") as f:
            f.write("prune_dead_pids\ngpu 0 24G Fake 24GB card\n")
        self.daemons = [Daemon(self.root, "study%d" % i, t) for i, t in enumerate(tomls)]
        self.env = dict(os.environ, SWEEPD_NVML_LIB=FAKE_NVML, FAKE_NVML_STATE=self.state,
                        SWEEPD_LEDGER=os.path.join(self.root, "gpu-ledger"), SWEEPD_LOG="info")
        self.foreign_after = foreign_after
        self.foreign = None  # (seconds after the first trial start, bytes)

    def run(self):
        launched = time.time()
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
            for p, err in procs:
                rc = p.wait(timeout=RUN_LIMIT_S)
                err.close()
                if rc != 0:
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
        return (max(parse_time(t["datetime_complete"]) for t in ts)
                - min(parse_time(t["datetime_start"]) for t in ts))

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
        estimate)."""
        return sum(1 for t in self.oom_trials()
                   if "other processes held the rest of the card" in (t.get("fail_reason") or ""))

    def admissions(self):
        """sweepd's admission lines, for the estimates' figures."""
        out = []
        for d in self.daemons:
            with open(os.path.join(d.dir, "sweepd.stderr")) as f:
                out.extend(line for line in f if "admitted: expected peak" in line)
        return out

    def cleanup(self):
        if os.environ.get("GPU_BENCH_KEEP"):
            print("  kept %s" % self.root)
            return
        shutil.rmtree(self.root, ignore_errors=True)


def oracle(jobs, cap_count, capacity, steps=(), learn=None):
    """List scheduling of `jobs` ([(peak, seconds)] in trial-number order) on one card: at every
    moment a trial ends (or the card's capacity changes), every waiting trial that fits, in list
    order, starts (a later trial may start before an earlier one that does not fit), as long as
    fewer than `cap_count` run. A trial fits when its peak plus the running trials' stays within
    the capacity for its whole run (`steps`: [(time, capacity from then on)], a foreign process
    arriving). Returns (makespan, trial-seconds / makespan).

    `learn` = (studies, k, prior[, known, settle]) makes it a learner that knows no peak in
    advance: `studies` gives each job's study; the first `k` jobs of a study are held at `prior`
    (at their peak where that is larger) until they are known, and its later jobs, at their
    peak, may start only once `known` (default `k`) of those first jobs are. A first job is
    known `settle` seconds after it starts (default: when it ends), and held at its peak from
    then on."""
    def cap_at(t):
        c = capacity
        for s, v in steps:
            if s <= t:
                c = v
        return c

    studies, k, prior, known_after, settle = [None] * len(jobs), 0, 0, 0, math.inf
    if learn is not None:
        studies, k, prior = learn[:3]
        known_after = learn[3] if len(learn) > 3 else k
        settle = learn[4] if len(learn) > 4 else math.inf
    first, seen = [], {}
    for s in studies:
        seen[s] = seen.get(s, 0) + 1
        first.append(learn is not None and seen[s] <= k)

    def held_at(r, c):
        return r["held"] if r["known_at"] is not None and c < r["known_at"] else r["peak"]

    known = {}
    t, running, pending, ends = 0.0, [], list(range(len(jobs))), []
    while pending:
        for i in list(pending):
            if len(running) >= cap_count:
                break
            peak, dur = jobs[i]
            if learn is not None and not first[i] and known.get(studies[i], 0) < known_after:
                continue
            held = max(peak, prior) if first[i] else peak
            checks = [t] + [s for s, _ in steps if t < s < t + dur]
            if all(sum(held_at(r, c) for r in running if r["end"] > c) + held <= cap_at(c)
                   for c in checks) or not running:
                running.append(dict(end=t + dur, peak=peak, held=held, study=studies[i],
                                    known_at=t + min(dur, settle) if first[i] else None))
                ends.append(t + dur)
                pending.remove(i)
        later = [r["end"] for r in running if r["end"] > t] + [s for s, _ in steps if s > t]
        later += [r["known_at"] for r in running
                  if r["known_at"] is not None and r["known_at"] > t]
        if not later:
            break
        t = min(later)
        for r in running:
            if r["known_at"] is not None and r["known_at"] <= t:
                r["known_at"] = None
                known[r["study"]] = known.get(r["study"], 0) + 1
        running = [r for r in running if r["end"] > t]
    span = max(ends) if ends else 0.0
    return span, (sum(d for _, d in jobs) / span if span else 0.0)


def jobs_of(runs):
    """Every trial's (peak, seconds) by trial number, per study, from the simulator's records of
    the runs (the same trials in each: a trial that failed in one run counts as it ran in
    another)."""
    per_study = []
    for i in range(len(runs[0].daemons)):
        merged = {}
        for r in runs:
            for n, (peak, seconds, complete) in r.daemons[i].records().items():
                if n not in merged or (complete and not merged[n][2]):
                    merged[n] = (peak, seconds, complete)
        per_study.append({n: (peak, seconds) for n, (peak, seconds, _) in merged.items()})
    return per_study


def pack_toml(name, n, max_par, env, params, gpu, seed=7):
    return study_toml(name, n, max_par, env, params, gpu, NO_BREAKER, seed=seed)


# The workloads the goal is judged on run every `[gpu]` key at its default; these set one.
NOT_DEFAULT = ("group",)


def packing_workloads():
    """(key, title, params, env, studies, foreign, extra `[gpu]` keys)."""
    return [
        ("bimodal", "bimodal: `mem` 2 or 6 GiB, `lr` no effect", BIMODAL_PARAMS, {}, 1, False,
         {}),
        ("continuous", "continuous: peak from `width` x `depth`, `lr` no effect",
         CONTINUOUS_PARAMS, CONTINUOUS_ENV, 1, False, {}),
        ("foreign", "continuous, a foreign process takes up to 6 GiB mid-run",
         CONTINUOUS_PARAMS, CONTINUOUS_ENV, 1, True, {}),
        ("two", "continuous, two daemons (two studies, half the trials each) on one card",
         CONTINUOUS_PARAMS, CONTINUOUS_ENV, 2, False, {}),
        ("group", "the same two daemons with `[gpu] memory_group = \"sim\"` in both (they run "
         "one program: each learns from the other's peaks too; not the defaults, so not judged "
         "against the goal)", CONTINUOUS_PARAMS, CONTINUOUS_ENV, 2, False,
         {"memory_group": '"sim"'}),
    ]


# Longer runs (sweepd only): users run hundreds to thousands of trials, where the model's first
# trials (admitted at `trial_memory`, wide bounds) are a small share of the run.
LONG_RUN_TRIALS = 120
LONG_RUN_LENGTH = "short"


def packing(started, only_workload=None, only_length=None, trials=None, baselines=True):
    load_start = loadavg()
    t0 = time.monotonic()
    rows, notes, checks, splits = measure_packing(only_workload, only_length, trials, baselines)
    head = ["workload", "oracle makespan s", "oracle at once", "oracle with headroom",
            "learner bound", "oracle on estimates",
            "sweepd oracle/sweepd", "sweepd at once", "sweepd OOMs"]
    long_head = list(head)
    if baselines:
        head += ["PAR=3 oracle/PAR", "PAR=3 at once", "PAR=3 OOMs",
                 "PAR=4 oracle/PAR", "PAR=4 at once", "PAR=4 OOMs"]
    tbl = table(head, rows)
    print(tbl)
    # The longer runs only with the whole section (the options above measure one thing).
    long_rows, long_notes, long_checks = [], [], []
    if not (only_workload or only_length or trials or not baselines):
        long_rows, long_notes, long_checks, _ = measure_packing(
            None, LONG_RUN_LENGTH, LONG_RUN_TRIALS, False)
        print(table(long_head, long_rows))
    elapsed = time.monotonic() - t0
    return packing_text(started, load_start, elapsed, tbl, notes, checks, splits,
                        table(long_head, long_rows) if long_rows else None, long_notes,
                        long_checks)


def measure_packing(only_workload, only_length, trials, baselines):
    """Runs sweepd (and fixed PAR unless not `baselines`) on each workload and length:
    (table rows, estimate notes, goal checks, figures for the interpretation)."""
    rows, notes, checks, splits = [], [], [], []
    for key, title, params, wenv, studies, foreign, gextra in packing_workloads():
        if only_workload and key != only_workload:
            continue
        for length, n, ramp, (lo, hi) in PACK_LENGTHS:
            if only_length and length != only_length:
                continue
            n = trials or n
            ramp, lo, hi = ramp * PACK_SCALE, lo * PACK_SCALE, hi * PACK_SCALE
            env = dict(PACK_ENV, SIM_RAMP_S=str(ramp), SIM_HOLD_RANGE="%g,%g" % (lo, hi),
                       SIM_RECORD="@RECORD@", **wenv)
            per = n // studies
            # The foreign process comes a third of the way into an ideal run.
            foreign_after = (n * (ramp + (lo + hi) / 2) / 4.5 / 3 + 1.5) if foreign else None
            configs = []
            tomls = [pack_toml("pack-%s-%d" % (key, i), per, PACK_MAX_PAR, env, params,
                               dict({"devices": '"all"'}, **gextra), seed=PACK_SEED + i)
                     for i in range(studies)]
            configs.append(("sweepd", tomls))
            for par in ((3, 4) if baselines else ()):
                # Two daemons share the fixed PAR between them.
                split = [par // studies + (1 if i < par % studies else 0)
                         for i in range(studies)]
                penv = dict(env, CUDA_VISIBLE_DEVICES="0")
                configs.append(("PAR=%d" % par, [
                    pack_toml("pack-%s-%d" % (key, i), per, split[i], penv, params,
                              {"devices": '"none"'}, seed=PACK_SEED + i) for i in range(studies)]))
            runs = []
            for label, tomls in configs:
                print("packing %s/%s: %s ..." % (key, length, label), flush=True)
                r = PackRun(label, tomls, foreign_after=foreign_after).run()
                print("  makespan %.1f s, %.2f at once, %d OOM" % (
                    r.makespan(), r.mean_parallel(), r.ooms()), flush=True)
                runs.append(r)
            steps = []
            sweepd_run = runs[0]
            if sweepd_run.foreign is not None:
                at, size = sweepd_run.foreign
                steps = [(at, PACK_CARD - size)]
            jobs = []
            for merged in jobs_of(runs):
                jobs.extend(merged[k] for k in sorted(merged))
            # Two studies: their trials interleaved in the order they were numbered.
            job_studies = [0] * len(jobs)
            if studies > 1:
                per_study = jobs_of(runs)
                jobs, job_studies = [], []
                for k in range(max(len(m) for m in per_study)):
                    for i, m in enumerate(per_study):
                        if k in m:
                            jobs.append(m[k])
                            job_studies.append(i)
            span, opar = oracle(jobs, PACK_MAX_PAR * studies, PACK_CARD, steps)
            # The same oracle told sweepd's estimates instead of the peaks, with sweepd's
            # headroom: how much of the gap the estimates alone explain.
            est = estimates_of(sweepd_run)
            per_study = jobs_of(runs)
            est_jobs = []
            for k in range(max(len(m) for m in per_study)):
                for i, m in enumerate(per_study):
                    if k in m:
                        est_jobs.append((est.get((i, k), m[k][0]), m[k][1]))
            est_steps = [(a, c - GIB) for a, c in steps]
            est_span, _ = oracle(est_jobs, PACK_MAX_PAR * studies, PACK_CARD - GIB, est_steps)
            # The true peaks on the card less sweepd's headroom: what the headroom alone costs.
            hr_span, _ = oracle(jobs, PACK_MAX_PAR * studies, PACK_CARD - GIB, est_steps)
            # A learner as good as can be with sweepd's prior and headroom: each study's first
            # trials held at the prior, every later peak known exactly once they have ended.
            learn_span, _ = oracle(jobs, PACK_MAX_PAR * studies, PACK_CARD - GIB, est_steps,
                                   learn=(job_studies, LEARN_K, LEARN_PRIOR))
            cells = ["%s (%s)" % (key, length), "%.1f" % span, "%.2f" % opar,
                     "%.2f" % (span / hr_span), "%.2f" % (span / learn_span),
                     "%.2f" % (span / est_span)]
            for r in runs:
                cells += ["%.2f" % (span / r.makespan()), "%.2f" % r.mean_parallel(),
                          str(r.ooms())]
            rows.append(cells)
            if key not in NOT_DEFAULT:
                checks.append((key, length, span / runs[0].makespan(), runs[0].ooms()))
            ratios = estimate_ratios(sweepd_run)
            splits.append((key, length, span / est_span, span / runs[0].makespan(),
                           min((span / r.makespan() for r in runs[1:]), default=float("nan")),
                           sum(r.ooms() for r in runs[1:]),
                           ratios[len(ratios) // 2] if ratios else float("nan"),
                           span / hr_span, span / learn_span))
            notes.append(estimate_note(key, length, sweepd_run))
            taken = sweepd_run.ooms_within_estimate()
            if sweepd_run.ooms():
                notes.append("%s (%s): %d of sweepd's %d OOMs came within the estimate the trial "
                             "was admitted with (its message: other processes held the rest of "
                             "the card)" % (key, length, taken, sweepd_run.ooms()))
            if sweepd_run.foreign is not None:
                notes.append("%s (%s): the foreign process took %s at %.1f s into the sweepd run"
                             % (key, length, human(str(sweepd_run.foreign[1])),
                                sweepd_run.foreign[0]))
            for r in runs:
                r.cleanup()
    return rows, notes, checks, splits


def goal_line(checks):
    met = [c for c in checks if c[2] >= 0.9 and c[3] == 0]
    return ("Goal: oracle/sweepd >= 0.9 with 0 OOMs on every workload: met on %d of %d (%s)."
            % (len(met), len(checks), ", ".join("%s %s %.2f/%d OOM" % c for c in checks)))


def packing_text(started, load_start, elapsed, tbl, notes, checks, splits, long_tbl,
                 long_notes, long_checks):
    lines = ["<!-- bench:packing -->", "## GPU packing: sweepd against an oracle and fixed PAR", ""]
    lines += header_lines(started, load_start, loadavg())
    lines += [
        "- Runtime of this section: %.0f s." % elapsed,
        "- Card: one simulated 24 GiB GPU. Every run starts on a fresh card; the daemons of a run "
        "share its GPU ledger (`SWEEPD_LEDGER`).",
        "- Trials: the simulated worker with a lazily created 500 MiB CUDA context per process "
        "(held until the process exits), a caching allocator that reserves 20 MiB segments and "
        "keeps them until the helper empties it between trials, allocation in 5 steps over the "
        "ramp, then the peak held; peaks vary by up to 2%% from trial to trial. Lengths (ramp + "
        "hold, the hold drawn per trial number, the same in every run): short %.1f s + %g-%g s "
        "(%d trials), long %.1f s + %g-%g s (%d trials), scaled down about 3x from the issue's "
        "1.5-5 s and 5-15 s to keep `make bench` short (`--scale 3` runs them at the issue's "
        "lengths: the same ratios within the noise, see the twenty-seventh side by side below)."
        % (PACK_LENGTHS[0][2], PACK_LENGTHS[0][3][0], PACK_LENGTHS[0][3][1], PACK_LENGTHS[0][1],
           PACK_LENGTHS[1][2], PACK_LENGTHS[1][3][0], PACK_LENGTHS[1][3][1],
           PACK_LENGTHS[1][1]),
        "- Workloads: " + "; ".join(w[1] for w in packing_workloads()) + ". "
        "Continuous peaks are 500 MiB context + 512 MiB + 2 MiB x `width` x `depth` "
        "(`width` 64-1024 log, `depth` 1-8): 1 to 17 GiB. The trials are drawn at random (seed "
        "%d; the second study of a two-daemon run: seed %d) and enqueued before each run "
        "(Optuna's `enqueue_trial`), so every run of a workload, sweepd's and fixed PAR's, of "
        "any build, runs the same trials under the same numbers." % (PACK_SEED, PACK_SEED + 1),
        "- sweepd: `[gpu] devices = \"all\"` and every other `[gpu]` key at its default "
        "(headroom 1 GiB, trial_memory 6 GiB, poll_interval 1 s, idle_worker_timeout 60 s, "
        "max_par_per_device 8), `[worker] max_par = %d` per daemon." % PACK_MAX_PAR,
        "- PAR=3 / PAR=4: the same daemon with `[gpu] devices = \"none\"`, `[worker] max_par` "
        "3 or 4 and `CUDA_VISIBLE_DEVICES=0` (the hand-tuned `PAR ?= 3`); two daemons split it "
        "(2+1, 2+2).",
        "- All runs: `[retry] oom = 0` (an OOM is a lost trial) and `breaker_threshold = 1000` "
        "(no quarantine), one run each.",
        "- Oracle: list scheduling of the same trials, in trial-number order, with the peaks and "
        "durations the simulator recorded for them (`SIM_RECORD`: the objective's own run time, "
        "without worker start-up or protocol; a trial that ran out of memory in every run as it "
        "was drawn: the peak and the length it would have had), on the same 24 GiB (no "
        "headroom), at most %d "
        "trials at once per study: whenever a trial ends, every waiting trial that fits for its "
        "whole run starts, in list order. With the foreign process, the card has that much less "
        "from the moment it came (the oracle knows it in advance)." % PACK_MAX_PAR,
        "- `oracle/X` = oracle makespan / X's makespan (first trial start to last trial end, "
        "from `sweepd trials --json`): 1.0 is the oracle's throughput. `at once` = trial-seconds "
        "/ makespan. OOMs: trials with `fail_kind == \"oom\"`.",
        "- `oracle with headroom`: the same oracle (the true peaks) on 24 GiB less sweepd's "
        "1 GiB headroom, as a fraction of the true oracle's throughput: what a scheduler that "
        "knew every peak in advance but kept sweepd's headroom would reach (list scheduling is "
        "greedy, not optimal: on the smaller card it can do better by chance, above 1.0).",
        "- `learner bound`: the same oracle on 24 GiB less sweepd's headroom as a learner that "
        "knows no peak in advance, at its best with sweepd's rule for a study's first trials: "
        "the first %d trials of each study are held at `trial_memory` x %g = %.1f GiB (at "
        "their peak where that is larger) for their whole run, and a later trial of the study "
        "may start only once %d of its trials have ended, then known exactly (its true peak, "
        "held for its run). A fraction of the true oracle's throughput: no scheduler that admits "
        "a study's first trials as sweepd does and holds what it admits trials with can do "
        "better than list scheduling does here, however good its model." % (
            LEARN_K, LEARN_MARGIN, LEARN_PRIOR / GIB, LEARN_K),
        "- `oracle on estimates`: the same oracle told the estimates sweepd admitted each trial "
        "with (from its admission log) instead of the true peaks, on 24 GiB less sweepd's 1 GiB "
        "headroom, as a fraction of the true oracle's throughput: how far the estimates and the "
        "headroom alone take sweepd from the oracle; the rest of the gap is the admission's "
        "mechanics (worker start-ups, protocol and admission latency, the line's order).",
        "",
        tbl,
        "",
        goal_line(checks),
        "",
        "Estimates (from the admission log lines of the sweepd runs): " + "; ".join(notes) + ".",
        "",
    ]
    if long_tbl:
        lines += [
            "### Longer runs: %d %s trials, sweepd only" % (LONG_RUN_TRIALS, LONG_RUN_LENGTH),
            "",
            "Users run hundreds to thousands of trials; in the runs above the model's first "
            "trials (admitted at `trial_memory` x 1.15, then with wide bounds while few are "
            "measured) are a large share. The same workloads with %d trials per run (%s "
            "lengths; two daemons: %d each), sweepd only, everything else as above:"
            % (LONG_RUN_TRIALS, LONG_RUN_LENGTH, LONG_RUN_TRIALS // 2),
            "",
            long_tbl,
            "",
            goal_line(long_checks),
            "",
            "Estimates: " + "; ".join(long_notes) + ".",
            "",
        ]
    lines += [
        "**Interpretation.** " + packing_story(splits, long_checks),
        "<!-- /bench:packing -->",
    ]
    return "\n".join(lines)


def packing_story(splits, long_checks=()):
    """What the figures say, written from them on every run."""
    if not splits:
        return ""
    default = [x for x in splits if x[0] not in NOT_DEFAULT] or splits
    lo = min(x[3] for x in default)
    hi = max(x[3] for x in default)
    est_lo = min(x[2] for x in default)
    est_hi = max(x[2] for x in default)
    out = [("sweepd reached %.2f to %.2f of the oracle's throughput, where fixed PAR lost "
            "trials to OOM on most workloads (%d OOMs over the PAR=3 and PAR=4 runs)"
            % (lo, hi, sum(x[5] for x in splits)))]
    out.append(
        "The oracle that knows every peak but keeps sweepd's 1 GiB headroom reaches %.2f to "
        "%.2f of the true oracle: list scheduling packs the card to its last GiB, so the goal "
        "of 0.9 leaves a scheduler that must learn the peaks, and hold a margin while it does, "
        "little room"
        % (min(x[7] for x in default), max(x[7] for x in default)))
    out.append(
        "A learner that holds each study's first %d trials at `trial_memory` x %g and then "
        "knows every peak exactly, but only once those %d have ended, reaches %.2f to %.2f "
        "(`learner bound`): the first trials of a study and the wait for their results cost "
        "that much before any question of how well the model learns"
        % (LEARN_K, LEARN_MARGIN, LEARN_K, min(x[8] for x in default),
           max(x[8] for x in default)))
    out.append(
        "The oracle told sweepd's estimates and its 1 GiB headroom reaches %.2f to %.2f of the "
        "true oracle. sweepd holds a trial's estimate back only until the trial has settled at "
        "its peak (it then counts at what it uses), so it can do better than that oracle, which "
        "holds each estimate for the whole trial; the estimates still decide when each trial "
        "may start. The first 3 trials of a study (of each study, with two daemons) are admitted "
        "at `trial_memory` x 1.15 = 6.9 GiB (or the largest peak measured x 1.15) whatever their "
        "size, and while the model has few "
        "trials its bound is wide: in runs of 30 to 40 trials that is a large share of the run. "
        "The median estimate/peak was %s on the bimodal workload, whose configs repeat (the "
        "largest peak of a config measured three times + 2%%), and %s on the others, whose "
        "configs never repeat"
        % (est_lo, est_hi,
           "/".join("%.2f" % x[6] for x in splits if x[0] == "bimodal") or "-",
           "/".join("%.2f" % x[6] for x in splits if x[0] != "bimodal") or "-"))
    out.append(
        "The rest is the admission's mechanics: a worker start-up for each new worker (a Python "
        "process here), the protocol and the database commit around each trial, which the "
        "oracle's durations (the objective's own time) leave out, a trial that counts at its "
        "estimate until readings have seen it hold its peak as long as it took to reach it, "
        "and the line's order: when a large trial at "
        "the head of the line has been passed 16 times, the card drains until it fits (only "
        "trials within what it leaves of the card start beside it)")
    two = [x for x in splits if x[0] == "two"]
    if two:
        out.append(
            "With two daemons each learns from its own trials only (by default), so each goes "
            "through the "
            "first trials at `trial_memory` and its wide early bounds; an idle worker of one "
            "daemon that holds memory the other's waiting trial needs is retired on request "
            "through the ledger (as soon as the holder sees the request), no longer after "
            "`idle_worker_timeout`; and a trial of one daemon passed by 16 of the other's starts "
            "(by 1 while its study runs none) holds its memory through the ledger, so the other "
            "drains the card for it rather than filling every byte freed with small trials "
            "(fairness between the studies first: side by side, holding at the first pass for a "
            "study that runs nothing gained 0.05 of the oracle on long trials and lost 0.04 on "
            "short ones)")
    group = [x for x in splits if x[0] == "group"]
    if group and two:
        out.append(
            "With `[gpu] memory_group` set in both (the two studies run one program), each "
            "learns from the other's measured peaks too: %s of the oracle, where learning "
            "apart reached %s (one run each; runs of one build on the same trials vary by "
            "about 0.02 with one daemon, by up to 0.1 with two, whose learning interleaves "
            "differently in every run; both studies start together, so each still admits its "
            "first trials at `trial_memory`)"
            % (", ".join("%.2f (%s)" % (x[3], x[1]) for x in group),
               ", ".join("%.2f (%s)" % (x[3], x[1]) for x in two)))
    foreign = [x for x in splits if x[0] == "foreign"]
    if foreign:
        out.append(
            "With the foreign process the card has 6 GiB less from a third of the way in, "
            "which the oracle knew in advance and planned around; sweepd sees it when it "
            "comes, and its wide early bounds weigh more on the smaller card. The foreign "
            "process takes what is free when it comes, up to 6 GiB, memory that trials sweepd "
            "admitted have yet to allocate included: when the card is packed tighter than "
            "that, one of them runs out of memory, which only a card kept 6 GiB short of full "
            "could prevent. sweepd reads that from the trial's message (it needed no more than "
            "it was admitted with), retries it and learns nothing of its params from it (see the "
            "notes below)")
    if long_checks:
        out.append(
            "With %d trials per run sweepd reached %s of the oracle (OOMs: %s): the learning "
            "phase explains that much of the gap of the short runs"
            % (LONG_RUN_TRIALS,
               ", ".join("%.2f (%s)" % (c[2], c[0]) for c in long_checks),
               sum(c[3] for c in long_checks)))
    return ". ".join(out) + "."


def estimates_of(run):
    """{(study index, trial number): the estimate (bytes) sweepd admitted it with}."""
    return estimates_in([d.dir for d in run.daemons])


def estimates_in(dirs):
    """`estimates_of` for the study directories `dirs` (in study order)."""
    out = {}
    for i, d in enumerate(dirs):
        with open(os.path.join(d, "sweepd.stderr")) as f:
            for line in f:
                if "admitted: expected peak" not in line:
                    continue
                try:
                    est = float(line.split("admitted: expected peak ")[1].split(" GiB")[0])
                    n = int(line.split(" trial=")[1].split()[0])
                except (IndexError, ValueError):
                    continue
                out[(i, n)] = int(est * GIB)
    return out


def estimate_ratios(run):
    """Each admitted trial's estimate / the peak it then had, sorted."""
    est = estimates_of(run)
    ratios = []
    for i, d in enumerate(run.daemons):
        for n, (peak, _, _) in d.records().items():
            if (i, n) in est and peak:
                ratios.append(est[(i, n)] / peak)
    return sorted(ratios)


def estimate_note(key, length, run):
    """How the admitted estimates stood against the peaks the trials then had."""
    ratios = estimate_ratios(run)
    if not ratios:
        return "%s (%s): no estimate logged" % (key, length)
    under = sum(1 for x in ratios if x < 1.0)
    return ("%s (%s): estimate/peak median %.2f, %d of %d under"
            % (key, length, ratios[len(ratios) // 2], under, len(ratios)))



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


def fragmentation_story(res):
    none, r50, r10, exp = (res[k] for k in ("none", "r50", "r10", "exp"))
    n_fit = frag_fits(FRAG_PER_TRIAL)
    out = []
    if none.ooms():
        out.append(
            "Without recycling the worker first ran out of memory on trial %d, its %s, as "
            "the simulated fragmentation predicts; sweepd then replaced it anyway (after an "
            "OOM it keeps a worker only if its memory between trials is back near its level "
            "after its first trial), so the run lost %d of %d trials, one per worker "
            "lifetime, not the %d a worker kept alive would lose (every trial from its %s "
            "on; computed from the simulator's rule, not measured)."
            % (none.first_oom(), ordinal(none.first_oom() + 1), len(none.ooms()), FRAG_N,
               FRAG_N - n_fit, ordinal(n_fit + 1)))
    else:
        out.append("Without recycling no trial ran out of memory in %d trials." % FRAG_N)
    if r50.ooms():
        out.append(
            "The seeds' `recycle_after = 50` did not help at %s per trial: it counts "
            "successful trials, and a fresh worker OOMs on its %s, before it reaches 50 "
            "(%d OOMs%s); at this rate the limit must be at most %d." % (
                human(FRAG_PER_TRIAL), ordinal(n_fit + 1), len(r50.ooms()),
                ", the same as without recycling" if len(r50.ooms()) == len(none.ooms())
                else "", n_fit))
    else:
        out.append("`recycle_after = 50` ran all %d trials without an OOM." % FRAG_N)
    extra = r10.wall - none.wall
    restarts = max(r10.workers - 1, 0)
    out.append(
        "`recycle_after = 10` ran %d of %d with %d OOMs at the price of %d worker restarts "
        "(%+.1f s wall against no recycling, ~%.0f ms per restart with a Python worker that "
        "imports nothing heavy; a real PyTorch worker pays seconds for CUDA init per restart)."
        % (r10.count("COMPLETE"), FRAG_N, len(r10.ooms()), restarts, extra,
           1000 * extra / restarts if restarts else 0))
    if "slow50" in res:
        slow_none, slow50 = res["slow_none"], res["slow50"]
        out.append(
            "At %s per trial the seeds' value %s: no recycling lost %d trials, "
            "`recycle_after = 50` %d."
            % (human(FRAG_SLOW), "works" if not slow50.ooms() else "is not enough either",
               len(slow_none.ooms()), len(slow50.ooms())))
    out.append(
        "The expandable-segments row (%d OOMs, %d worker) only shows the simulator's model "
        "of that setting (a tenth of the fragmentation), not PyTorch's real allocator."
        % (len(exp.ooms()), exp.workers))
    return " ".join(out)


def fragmentation(started):
    load_start = loadavg()
    variants = [
        ("none", "no recycling", FRAG_PER_TRIAL, None, {}),
        ("r50", "recycle_after = 50", FRAG_PER_TRIAL, 50, {}),
        ("r10", "recycle_after = 10", FRAG_PER_TRIAL, 10, {}),
        ("exp", "no recycling, SIM_EXPANDABLE_HELPS=1", FRAG_PER_TRIAL, None,
         {"SIM_EXPANDABLE_HELPS": "1"}),
        ("slow_none", "no recycling", FRAG_SLOW, None, {}),
        ("slow50", "recycle_after = 50", FRAG_SLOW, 50, {}),
    ]
    gpu = {"devices": '"all"', "headroom": '"1GiB"', "trial_memory": '"5GiB"',
           "poll_interval": '"100ms"'}
    rows, res = [], {}
    for key, label, frag, recycle, extra in variants:
        print("fragmentation: %s, %s/trial ..." % (label, frag), flush=True)
        env = dict(FRAG_ENV, SIM_FRAG_PER_TRIAL=frag, **extra)
        cfg = study_toml("frag", FRAG_N, 1, env, FRAG_PARAMS, gpu, NO_BREAKER,
                         worker_extra="recycle_after = %d" % recycle if recycle else "")
        r = Run(label, cfg).run(parse_size(FRAG_CONTEXT))
        r.workers = r.sql("SELECT COUNT(*) FROM sweepd_workers")[0][0]
        first = r.first_oom()
        rows.append([label, human(frag), r.count("COMPLETE"), len(r.ooms()),
                     "-" if first is None else first, r.workers, max(r.workers - 1, 0),
                     "%.1f" % r.wall])
        print("  %.1f s wall, %d complete, %d oom, %d workers" % (
            r.wall, r.count("COMPLETE"), len(r.ooms()), r.workers), flush=True)
        res[key] = r
        r.cleanup()
    head = ["run", "frag / trial", "complete", "OOM fails", "first OOM (trial #)",
            "workers spawned", "worker restarts", "wall s"]
    tbl = table(head, rows)
    print(tbl)
    n_fit = frag_fits(FRAG_PER_TRIAL)
    lines = ["<!-- bench:fragmentation -->",
             "## Fragmentation: a persistent worker with and without recycling", ""]
    lines += header_lines(started, load_start, loadavg())
    lines += [
        "- Workload: %d trials per run, one persistent worker (`max_par = 1`), one 24 GiB "
        "card, `[gpu] devices = \"all\"`, `headroom = \"1GiB\"`, `[retry] oom = 0`, "
        "`breaker_threshold = 1000` (so a run of OOMs does not quarantine the card). Each "
        "trial allocates %s on top of the worker's %s context in one step and frees it after "
        "0.02 s; the simulated caching allocator then keeps `SIM_FRAG_PER_TRIAL` reserved but "
        "unallocated, for good, per trial served. At %s per trial a fresh worker completes "
        "%d trials and OOMs on its %s (its baseline plus the %s peak then exceeds 24 GiB); "
        "at %s, on its %s."
        % (FRAG_N, human(FRAG_PEAK), human(FRAG_CONTEXT), human(FRAG_PER_TRIAL), n_fit,
           ordinal(n_fit + 1), human(FRAG_PEAK), human(FRAG_SLOW),
           ordinal(frag_fits(FRAG_SLOW) + 1)),
        "- Runs at %s per trial (the scenario): no recycling; `[worker] recycle_after = 50` "
        "(the seeds' value); `recycle_after = 10`; no recycling with `SIM_EXPANDABLE_HELPS=1`. "
        "Two more at %s per trial: no recycling and `recycle_after = 50`." % (
            human(FRAG_PER_TRIAL), human(FRAG_SLOW)),
        "- sweepd injects `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` into every worker "
        "by default; with `SIM_EXPANDABLE_HELPS=1` the simulator models that setting as "
        "cutting the per-trial fragmentation to a tenth. That is a *simulated* effect chosen "
        "by the simulator, not a measurement of PyTorch's allocator.",
        "- `first OOM` is the trial number (0-based) of the first `fail_kind == \"oom\"` in "
        "`sweepd trials --json`; `workers spawned` is the row count of `sweepd_workers`; "
        "wall time is the whole `sweepd run` (not scaled: these trials are bookkeeping-bound).",
        "",
        tbl,
        "",
        "**Interpretation.** " + fragmentation_story(res),
        "<!-- /bench:fragmentation -->",
    ]
    return "\n".join(lines)



# ------------------------------------------------------------------------------------------------
def write_section(name, text):
    """Replaces (or appends) the `<!-- bench:NAME -->` section of docs/benchmarks.md."""
    begin, end = "<!-- bench:%s -->" % name, "<!-- /bench:%s -->" % name
    try:
        with open(DOC) as f:
            doc = f.read()
    except FileNotFoundError:
        doc = DOC_INTRO
    i, j = doc.find(begin), doc.find(end)
    if i >= 0 and j > i:
        doc = doc[:i] + text + doc[j + len(end):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    tmp = DOC + ".tmp.%d" % os.getpid()
    with open(tmp, "w") as f:
        f.write(doc)
    os.replace(tmp, DOC)


def main():
    global PACK_SEED
    global PACK_SCALE
    global STARTED_REVISION
    STARTED_REVISION = revision()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["packing", "fragmentation"])
    ap.add_argument("--no-docs", action="store_true", help="print only; leave docs alone")
    ap.add_argument("--workload", help="packing: only this workload (bimodal, continuous, "
                    "foreign, two, group); implies --no-docs")
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
    if args.seed is not None:
        PACK_SEED = args.seed
    if args.scale is not None:
        if not args.scale > 0:
            sys.exit("gpu_bench: --scale must be above 0, not %g" % args.scale)
        PACK_SCALE = args.scale
    for path, how in ((SWEEPD, "cargo build --release"), (FAKE_NVML, "make fake-nvml")):
        if not os.path.exists(path):
            sys.exit("gpu_bench: %s is missing: run `%s` (or `make bench`)" % (path, how))
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    if (args.workload or args.length or args.trials or args.no_baselines
            or args.seed is not None or args.scale is not None):
        args.no_docs = True
    benches = [("packing", lambda: packing(started, args.workload, args.length, args.trials,
                                           not args.no_baselines)),
               ("fragmentation", lambda: fragmentation(started))]
    for name, fn in benches:
        if args.only and args.only != name:
            continue
        text = fn()
        if not args.no_docs:
            write_section(name, text)
    print("gpu_bench: done in %.0f s%s" % (time.monotonic() - t0,
                                           "" if args.no_docs else "; see docs/benchmarks.md"))


if __name__ == "__main__":
    main()
