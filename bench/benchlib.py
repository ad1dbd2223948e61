"""What the bench scripts share: the doc's sections, the machine and source lines, raw results,
builds, the code's own constants, and the two workloads more than one script runs (the instant
study of the overhead benches, the packing bench's oracle).

Every bench script imports this module and no other bench script. The constants a bench
computes with or cites (the memory model's first trials, the `[gpu]` and `[sampler]` defaults)
come from the binary, `sweepd internals --json` (`src/cli/internals.rs`), never from a copy.
"""

import datetime
import json
import math
import os
import platform
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"
DOC = ROOT / "docs" / "benchmarks.md"
RAW_DIR = ROOT / "target" / "bench"
GIB = 1 << 30

# The header of docs/benchmarks.md, for a document written from nothing.
DOC_INTRO = """# Benchmarks

Measured figures for sweepd. Each section is written by the script that produced it, between
`<!-- bench:NAME -->` and `<!-- /bench:NAME -->` markers, and is replaced when that script runs
again; `make bench` runs them all. The experiments that chose sweepd's design (side-by-side
runs of two builds, what-ifs on kept runs) are in `docs/decisions.md`.
"""


def log(msg):
    print("[%s %s] %s" % (Path(sys.argv[0]).stem, time.strftime("%H:%M:%S"), msg), file=sys.stderr,
          flush=True)


# ----------------------------------------------------------------------------------------------
# The document


def write_section(marker, body, doc=None):
    """Replaces the text between `<!-- bench:MARKER -->` and `<!-- /bench:MARKER -->` of the doc
    with `body` (appending the section where it is absent, starting the doc from `DOC_INTRO`
    where there is none), re-reading the file just before writing and replacing it whole, so
    that the rest of it is left as it was."""
    doc = Path(doc or DOC)
    start, end = "<!-- bench:%s -->" % marker, "<!-- /bench:%s -->" % marker
    block = "%s\n%s\n%s" % (start, body.strip("\n"), end)
    doc.parent.mkdir(parents=True, exist_ok=True)
    text = doc.read_text() if doc.exists() else DOC_INTRO
    i, j = text.find(start), text.find(end)
    if i >= 0 and j > i:
        text = text[:i] + block + text[j + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = doc.with_name(doc.name + ".tmp.%d" % os.getpid())
    tmp.write_text(text)
    os.replace(tmp, doc)
    log("wrote section %s of %s" % (marker, doc))


def publish(marker, body, no_doc):
    """Prints the section, and writes it to the doc unless `no_doc`."""
    print(body)
    if not no_doc:
        write_section(marker, body)


def save_raw(name, data):
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    path = RAW_DIR / name
    path.write_text(json.dumps(data))
    log("raw results: %s" % path)


def load_raw(name):
    path = RAW_DIR / name
    if not path.exists():
        raise SystemExit("%s: no raw results to render: run the bench first" % path)
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------------------------
# Figures


def percentile(xs, q):
    """Linear-interpolation percentile (numpy's default), q in [0, 100]."""
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def prob_less(a, b):
    """P(A < B) + 0.5 P(A = B) for independent draws from samples a and b (the common-language
    effect size of the Mann-Whitney U test): 0.5 = no difference, 1 = A always lower."""
    wins = sum((x < y) + 0.5 * (x == y) for x in a for y in b)
    return wins / (len(a) * len(b))


def prob_less_interval(a, b, level=0.95, draws=2000, seed=0):
    """The bootstrap interval of `prob_less(a, b)`: each sample redrawn with replacement (a
    run's seed is the unit), `draws` times from a fixed seed, the central `level` of the P's."""
    rng = random.Random(seed)
    ps = sorted(prob_less(rng.choices(a, k=len(a)), rng.choices(b, k=len(b)))
                for _ in range(draws))
    tail = (1 - level) / 2 * 100
    return percentile(ps, tail), percentile(ps, 100 - tail)


def fmt(x):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000 or a < 1e-3:
        return "%.3g" % x
    if a >= 100:
        return "%.1f" % x
    if a >= 1:
        return "%.3f" % x
    return "%.4f" % x


def span(xs, form="%.2f"):
    """The range of `xs` for the text: `0.61 to 0.91`, or the one value where they agree."""
    lo, hi = form % min(xs), form % max(xs)
    return lo if lo == hi else "%s to %s" % (lo, hi)


def gib(b):
    """Bytes as GiB for the text: `6 GiB`, `6.9 GiB`."""
    return ("%.1f GiB" % (b / GIB)).replace(".0 ", " ")


# ----------------------------------------------------------------------------------------------
# The machine and the source


def _out(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip()
    except OSError:
        return "unknown"


def machine_info():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import optuna

        optuna_version = optuna.__version__
    except ImportError:
        optuna_version = "not installed"
    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "arch": platform.machine(),
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "optuna": optuna_version,
        "rustc": _out(["rustc", "--version"]),
        "loadavg": os.getloadavg(),
    }


def source_state():
    """The commit the binaries are built from, read before building (src/ may change while a
    bench of several minutes runs; the binary measured does not)."""
    commit = _out(["git", "rev-parse", "--short", "HEAD"]) or "unknown"
    dirty = _out(["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "Cargo.toml",
                  "Cargo.lock", "migrations", "migrations-postgres"])
    return commit + (" + uncommitted changes in src/" if dirty else "")


def machine_lines(info, load_end, load_note="other work on the machine inflates timings, never the "
                  "quality figures"):
    """The date, machine, software and load lines every section starts with (`info`:
    `machine_info()` with `commit` from `source_state()`)."""
    return [
        "- Date: %s" % info["date_utc"],
        "- Machine: `%s`, %s, nproc %s, Linux %s"
        % (info["arch"], info["cpu"], info["nproc"], info["kernel"]),
        "- Software: sweepd %s (release build), %s, Python %s, Optuna %s"
        % (info["commit"], info["rustc"], info["python"], info["optuna"]),
        "- Load average (1/5/15 min) at start %s, at end %s: %s"
        % ("/".join("%.2f" % x for x in info["loadavg"]), "/".join("%.2f" % x for x in load_end),
           load_note),
    ]


# ----------------------------------------------------------------------------------------------
# Builds and the code's constants


def target_dir(args):
    return Path(args.target_dir) if getattr(args, "target_dir", None) else ROOT / "target"


def cargo_build(args, what):
    """`cargo build --release` of `what` (`["--example", NAME]`, `["--bin", "sweepd"]`), unless
    `args.no_build`."""
    if getattr(args, "no_build", False):
        return
    cmd = [os.environ.get("CARGO", "cargo"), "build", "--release"] + what
    if getattr(args, "target_dir", None):
        cmd += ["--target-dir", str(args.target_dir)]
    log(" ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True)


_INTERNALS = {}


def internals(binary=None):
    """The constants and defaults of the code that the benches compute with and cite, as
    `sweepd internals --json` prints them from their definitions: {"consts": {...},
    "defaults": {"gpu": {...}, "sampler": {...}}}. `binary`: the sweepd measured (default
    `target/release/sweepd`); one built before the subcommand existed is answered by this
    tree's, with a warning."""
    own = ROOT / "target" / "release" / "sweepd"
    binary = Path(binary or own)
    if binary not in _INTERNALS:
        out = subprocess.run([str(binary), "internals", "--json"], capture_output=True, text=True)
        if out.returncode != 0 and binary != own:
            log("%s has no `internals` subcommand: the constants are this tree's (%s)"
                % (binary, own))
            _INTERNALS[binary] = internals(own)
        elif out.returncode != 0:
            raise SystemExit("`%s internals --json` failed (%d): build it (`cargo build --release`)"
                             "\n%s" % (binary, out.returncode, out.stderr.strip()))
        else:
            _INTERNALS[binary] = json.loads(out.stdout)
    return _INTERNALS[binary]


def internal(values, name):
    """The value at dotted `name` (`consts.PRIOR_MARGIN`) of `internals()`'s answer, failing
    with the name when the binary does not print it."""
    v = values
    for key in name.split("."):
        if not isinstance(v, dict) or key not in v:
            raise SystemExit("`sweepd internals --json` prints no %s: the bench and the code "
                             "disagree (src/cli/internals.rs)" % name)
        v = v[key]
    return v


# ----------------------------------------------------------------------------------------------
# The instant study: search_bench.py overhead, postgres_bench.py and ab_overhead.py run it on
# both sides, sweepd with persistent Python workers and Optuna in-process, the same 4 params
# (float, int with step, categorical, log float) and the same objective.

INSTANT_WORKER = '''\
import time

import sweepd_worker


def objective(trial):
    p = trial.params
    if {sleep} > 0:
        time.sleep({sleep})
    return (float(p["x"]) - 1.5) ** 2 + 0.5 * (int(p["y"]) - 2) ** 2


sweepd_worker.serve(objective)
'''

INSTANT_TOML = '''\
[study]
name = "{name}"
direction = "minimize"
n_trials = {n}
sampler = "{sampler}"
seed = {seed}

[storage]
url = "{url}"

[worker]
command = [{python}, "worker.py"]
mode = "persistent"
max_par = {par}
trial_timeout = "1m"
log_dir = "logs"

[params.x]
type = "float"
low = -5.0
high = 5.0

[params.y]
type = "int"
low = -4
high = 8
step = 2

[params.optimizer]
type = "categorical"
choices = ["adam", "sgd", "rmsprop"]

[params.lr]
type = "float"
low = 1e-5
high = 1e-1
log = true
'''


def write_instant_study(d, n, par, sampler="tpe", seed=1, url="sqlite:///sweepd.db", name="overhead",
                        sleep=0):
    """A study directory `d` (created) with the instant study's `worker.py` and
    `supervisor.toml`."""
    d = Path(d)
    d.mkdir(parents=True)
    (d / "worker.py").write_text(INSTANT_WORKER.format(sleep=sleep))
    (d / "supervisor.toml").write_text(INSTANT_TOML.format(
        name=name, n=n, sampler=sampler, seed=seed, url=url, par=par,
        python=json.dumps(sys.executable)))
    return d / "supervisor.toml"


def instant_objective(trial):
    """The instant study's objective for Optuna: the same params, suggested as it runs."""
    x = trial.suggest_float("x", -5.0, 5.0)
    y = trial.suggest_int("y", -4, 8, step=2)
    trial.suggest_categorical("optimizer", ["adam", "sgd", "rmsprop"])
    trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    return (x - 1.5) ** 2 + 0.5 * (y - 2) ** 2


CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid):
    """(utime + stime) of the process itself, in seconds; None once it is gone."""
    try:
        s = open("/proc/%d/stat" % pid).read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def _proc_hwm_kib(pid):
    try:
        for line in open("/proc/%d/status" % pid):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _ctx_switches(pid):
    """Voluntary + involuntary context switches summed over the process's live threads."""
    total = 0
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for t in tasks:
        try:
            for line in open("/proc/%d/task/%s/status" % (pid, t)):
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def _children(pid):
    try:
        kids = []
        for task in os.listdir("/proc/%d/task" % pid):
            kids += [int(x) for x in open("/proc/%d/task/%s/children" % (pid, task)).read().split()]
        return kids
    except OSError:
        return []


def completion_times(db):
    """The COMPLETE trials' `datetime_complete` (epoch seconds, sorted) and the count of trials
    per state, of a SQLite study."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT datetime_complete FROM trials WHERE state = 'COMPLETE' ORDER BY datetime_complete"
        ).fetchall()
        states = dict(con.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
    finally:
        con.close()
    stamp = "%Y-%m-%d %H:%M:%S.%f"
    return [datetime.datetime.strptime(r[0], stamp).timestamp() for r in rows], states


def window_ms(ts, a, b):
    """ms per trial between the a-th and b-th completions (1-based counts); None if not reached."""
    if a < 1 or b > len(ts) or b <= a:
        return None
    return 1e3 * (ts[b - 1] - ts[a - 1]) / (b - a)


def cpu_window_ms(samples, ts, a, b):
    """Daemon CPU ms per trial between the a-th and b-th completions: the polled CPU-time
    samples, interpolated at those completion times."""
    if a < 1 or b > len(ts) or b <= a or len(samples) < 2:
        return None

    def cpu_at(t):
        if t <= samples[0][0] or t >= samples[-1][0]:
            return None
        lo, hi = 0, len(samples) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if samples[mid][0] <= t:
                lo = mid
            else:
                hi = mid
        (t0, c0), (t1, c1) = samples[lo], samples[hi]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c0

    # The last poll can come before the last completions: end the window at the last completion
    # the polls cover instead (the daemon is stopped only ~0.2 s later).
    while b > a and b > 1 and ts[b - 1] >= samples[-1][0]:
        b -= 1
        a -= 1
    if a < 1:
        return None
    ca, cb = cpu_at(ts[a - 1]), cpu_at(ts[b - 1])
    if ca is None or cb is None:
        return None
    return 1e3 * (cb - ca) / (b - a)


def run_daemon(sweepd, workdir, n, par, deadline_s, sampler="tpe"):
    """`sweepd run` of the instant study to `n` trials on SQLite (stopped by SIGINT after
    `deadline_s`), under `/usr/bin/time -v` where there is one: wall time, the daemon's own CPU,
    peak RSS and context switches (polled from /proc every 0.2 s), its workers' CPU, and the
    per-trial cost in windows of completions."""
    d = Path(workdir) / ("sweepd-%s-n%d-par%d" % (sampler, n, par))
    if d.exists():
        shutil.rmtree(d)
    config = write_instant_study(d, n, par, sampler=sampler)
    time_bin = shutil.which("time", path="/usr/bin")
    cmd = [str(sweepd), "run", "-c", str(config)]
    if time_bin:
        cmd = [time_bin, "-v", "-o", str(d / "time.txt")] + cmd
    errf = open(d / "daemon.log", "w")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=d, stdout=errf, stderr=subprocess.STDOUT)
    pid = p.pid
    if time_bin:
        for _ in range(1000):
            kids = _children(p.pid)
            if kids or p.poll() is not None:
                break
            time.sleep(0.002)
        pid = kids[0] if kids else p.pid
    cpu, hwm, worker_cpu, interrupted, samples, ctx = 0.0, 0, {}, False, [], 0
    while p.poll() is None:
        c = _proc_cpu(pid)
        h = _proc_hwm_kib(pid)
        x = _ctx_switches(pid)
        if x is not None:
            ctx = x
        if c is not None:
            cpu = c
            samples.append((time.time(), c))
        if h is not None:
            hwm = h
        for k in _children(pid):
            wc = _proc_cpu(k)
            if wc is not None:
                worker_cpu[k] = wc
        if not interrupted and time.perf_counter() - t0 > deadline_s:
            log("  deadline of %.0f s reached: SIGINT to the daemon" % deadline_s)
            os.kill(pid, signal.SIGINT)
            interrupted = True
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    errf.close()
    if not (d / "sweepd.db").exists():
        raise SystemExit("%s run exited %s before creating its study; %s:\n%s" % (
            sweepd, p.returncode, d / "daemon.log", (d / "daemon.log").read_text()[-3000:]))
    ts, states = completion_times(d / "sweepd.db")
    res = {"n": n, "par": par, "sampler": sampler, "wall_s": wall, "cpu_samples": samples,
           "rc": p.returncode, "interrupted": interrupted,
           "complete": len(ts), "states": states, "daemon_cpu_s": cpu, "daemon_hwm_kib": hwm,
           "daemon_ctx_switches": ctx,
           "worker_cpu_s": sum(worker_cpu.values()), "n_workers_seen": len(worker_cpu),
           "first_to_last_s": (ts[-1] - ts[0]) if ts else None}
    if time_bin and (d / "time.txt").exists():
        t = (d / "time.txt").read_text()
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", t)
        res["time_maxrss_kib"] = int(m.group(1)) if m else None
        u = re.search(r"User time \(seconds\): ([\d.]+)", t)
        s = re.search(r"System time \(seconds\): ([\d.]+)", t)
        res["time_cpu_s"] = float(u.group(1)) + float(s.group(1)) if u and s else None
    k = len(ts)
    res["win_1k_2k_ms"] = window_ms(ts, 1000, 2000)
    res["win_last_1k_ms"] = window_ms(ts, k - 1000, k) if k > 2000 else None
    res["cpu_1k_2k_ms"] = cpu_window_ms(samples, ts, 1000, 2000)
    res["cpu_last_1k_ms"] = cpu_window_ms(samples, ts, k - 1000, k) if k > 2000 else None
    res["windows"], res["cpu_windows"] = {}, {}
    for a in (1000, 5000, 10000, 25000, 50000, 75000, 99000):
        if a + 1000 <= k:
            res["windows"]["%d-%d" % (a, a + 1000)] = window_ms(ts, a, a + 1000)
            res["cpu_windows"]["%d-%d" % (a, a + 1000)] = cpu_window_ms(samples, ts, a, a + 1000)
    if p.returncode != 0 and not interrupted:
        log("  daemon exited with status %d; log: %s" % (p.returncode, d / "daemon.log"))
        log((d / "daemon.log").read_text()[-3000:])
    return res


# ----------------------------------------------------------------------------------------------
# The packing bench's oracle and its records: gpu_bench.py computes its table with them,
# packing_whatif.py its what-ifs on a kept run (tests/python/test_bench_oracle.py pins it).


def capacity_at(capacity, steps, t):
    """The card's capacity at time `t`: `capacity`, or the last of `steps` ([(time, capacity
    from then on)]) that has come by then."""
    c = capacity
    for s, v in steps:
        if s <= t:
            c = v
    return c


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
            if all(sum(held_at(r, c) for r in running if r["end"] > c) + held
                   <= capacity_at(capacity, steps, c) for c in checks) or not running:
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


def records_in(path):
    """{trial number: (peak bytes, seconds, complete)} from the simulated worker's record file
    (`SIM_RECORD`): as the trials ran where they completed, and as they were drawn where they
    failed (a trial that ran out of memory held less, for less time, than it needed)."""
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


def estimates_in(dirs):
    """{(study index, trial number): the estimate (bytes) sweepd admitted the trial with}, from
    the admission lines of the `sweepd.stderr` in each study directory of `dirs` (in study
    order)."""
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


def caps_bound(jobs, cap_count, capacity, steps=(), first=(), prior=0, ramp=0.0):
    """The oracle's list scheduling (`oracle`) under issue 41's design: a trial runs within the
    memory it was admitted with and a wrong guess costs it alone the seconds to its cap. The
    trials of `first` (indices into `jobs`: each study's first trials) are admitted at `prior`;
    one whose peak is above it holds `prior` for the part of its ramp (`ramp` seconds, linear
    from 0 to its peak) that reaches the prior, fails at its cap, and is re-run at its true
    peak in its place in the list (before every later trial). Every other peak is known
    exactly, and a first trial within the prior is held at its peak. Returns (makespan,
    seconds lost to capped attempts)."""
    first = set(first)
    pending = []  # (list position, attempt, held, seconds)
    for i, (peak, dur) in enumerate(jobs):
        if i in first and peak > prior:
            pending.append((i, 0, prior, min(dur, ramp * prior / peak)))
        else:
            pending.append((i, 1, peak, dur))
    t, running, span, lost = 0.0, [], 0.0, 0.0
    while pending or running:
        # A capped attempt that has ended frees its memory and puts its re-run in the list.
        pending += [(i, 1) + tuple(jobs[i]) for end, _, i in running if i is not None and end <= t]
        running = [r for r in running if r[0] > t]
        for job in sorted(pending):
            if len(running) >= cap_count:
                break
            i, attempt, held, dur = job
            checks = [t] + [s for s, _ in steps if t < s < t + dur]
            if running and not all(sum(h for end, h, _ in running if end > c) + held
                                   <= capacity_at(capacity, steps, c) for c in checks):
                continue
            running.append((t + dur, held, None if attempt else i))
            pending.remove(job)
            span = max(span, t + dur)
            if not attempt:
                lost += dur
        if any(i is not None and end <= t for end, _, i in running):
            continue  # a capped attempt of no length: its re-run is in the list at once
        later = [end for end, _, _ in running if end > t] + [s for s, _ in steps if s > t]
        if not later:
            break
        t = min(later)
    return span, lost


def first_trials(studies, k):
    """The indices of each study's first `k` jobs (`studies`: each job's study, in list
    order)."""
    seen, out = {}, []
    for i, s in enumerate(studies):
        seen[s] = seen.get(s, 0) + 1
        if seen[s] <= k:
            out.append(i)
    return out


# What sweepd's reason says of an OOM whose trial was within what it was admitted with
# (`src/supervisor/policy.rs`, `oom_verdict`): other processes held the memory counted for it.
COLLATERAL_TEXT = "other processes held the rest of the card"


def collateral_ooms(trials):
    """The trials (`sweepd trials --json` rows) that failed `oom` within what they were admitted
    with: they died because another process grew, not because they did."""
    return [t for t in trials if t.get("fail_kind") == "oom"
            and COLLATERAL_TEXT in (t.get("fail_reason") or "")]


def seconds_lost_to_caps(trials):
    """(seconds of the attempts that failed at their own cap, every trial's seconds) of the
    `sweepd trials --json` rows `trials`: each row's `duration_s`, from its start to its end."""
    total = lost = 0.0
    for t in trials:
        seconds = t.get("duration_s") or 0.0
        total += seconds
        if t.get("fail_kind") == "cap":
            lost += seconds
    return lost, total


def merge_attempts(runs):
    """Every trial's (peak, seconds) by its number, from the records of several runs of the same
    trials: `runs` is [(records, copies)], `records` as `records_in` reads them and `copies`
    {copy's number: the number of the trial it re-runs} (sweepd re-runs a failed trial, at its
    cap or after an OOM, as a copy under a new number). A trial's figures are those of an attempt
    that completed, in any run, where there is one; else as it was drawn."""
    merged = {}
    for records, copies in runs:
        for n, (peak, seconds, complete) in sorted(records.items()):
            first = n
            while first in copies:
                first = copies[first]
            if first not in merged or (complete and not merged[first][2]):
                merged[first] = (peak, seconds, complete)
    return {n: (peak, seconds) for n, (peak, seconds, _) in merged.items()}
