#!/usr/bin/env python3
"""Search benchmarks of sweepd: sampler quality and whole-daemon overhead, against Optuna.

Run with the test venv's Python (Optuna 5.0 from requirements-test.txt)::

    .venv/bin/python bench/search_bench.py all          # both; what `make bench` runs
    .venv/bin/python bench/search_bench.py sampler      # benchmark 1 only
    .venv/bin/python bench/search_bench.py overhead     # benchmark 2 only
    .venv/bin/python bench/search_bench.py sampler --seeds 3 --trials 60 --no-doc   # smoke test
    .venv/bin/python bench/search_bench.py render       # rewrite the doc from target/bench/*.json

1. ``sampler``: six synthetic functions (2-D to 10-D, one mixed float/int/categorical), each
   minimized from ``--seeds`` seeds for ``--trials`` sequential trials by sweepd's random and TPE
   samplers (driven directly by ``bench/sampler_bench.rs``, no daemon) and by Optuna's
   ``TPESampler`` and ``RandomSampler`` (ask/tell loop, in-memory storage). The functions are
   defined identically in Rust and here; the run first checks that both definitions agree.
2. ``overhead``: the whole daemon (``target/release/sweepd run``) with persistent Python workers
   whose objective returns at once, sampler TPE, at 1k/10k/100k trials; then Optuna with SQLite
   storage and TPE on the same search space and instant objective.

Each writes its section of ``docs/benchmarks.md`` (between ``<!-- bench:sampler -->`` and
``<!-- /bench:sampler -->``, resp. ``<!-- bench:overhead -->``...) and its raw results to
``target/bench/``. Nothing else in the document is touched.
"""

import argparse
import concurrent.futures
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
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
RAW_DIR = ROOT / "target" / "bench"

DOC_INTRO = """# Benchmarks

Measured results, each section written by the script that produced it (`make bench` runs them
all). Every section states its date, machine, command and parameters; figures from different
machines or dates are not comparable.
"""

# ----------------------------------------------------------------------------------------------
# Test functions: the same definitions as bench/sampler_bench.rs (checked by `check_functions`).

BRANIN_B = 5.1 / (4.0 * math.pi * math.pi)
BRANIN_C = 5.0 / math.pi
BRANIN_T = 1.0 / (8.0 * math.pi)

H6_ALPHA = [1.0, 1.2, 3.0, 3.2]
H6_A = [
    [10.0, 3.0, 17.0, 3.5, 1.7, 8.0],
    [0.05, 10.0, 17.0, 0.1, 8.0, 14.0],
    [3.0, 3.5, 1.7, 10.0, 17.0, 8.0],
    [17.0, 8.0, 0.05, 10.0, 0.1, 14.0],
]
H6_P = [
    [0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
    [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
    [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
    [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381],
]

# (name, best log10(lr), offset), as NN_OPTIMIZERS in the Rust example.
NN_OPTIMIZERS = [("sgd", -1.5, 0.3), ("adam", -3.0, 0.0), ("rmsprop", -3.5, 0.1)]


def _xs(p):
    return [p["x%d" % i] for i in range(len(p))]


def branin(p):
    x1, x2 = p["x0"], p["x1"]
    return (
        (x2 - BRANIN_B * x1 * x1 + BRANIN_C * x1 - 6.0) ** 2
        + 10.0 * (1.0 - BRANIN_T) * math.cos(x1)
        + 10.0
    )


def hartmann6(p):
    x = _xs(p)
    s = 0.0
    for i in range(4):
        inner = sum(H6_A[i][j] * (x[j] - H6_P[i][j]) ** 2 for j in range(6))
        s += H6_ALPHA[i] * math.exp(-inner)
    return -s


def rosenbrock(p):
    x = _xs(p)
    return sum(100.0 * (x[i + 1] - x[i] * x[i]) ** 2 + (1.0 - x[i]) ** 2 for i in range(len(x) - 1))


def styblinski_tang(p):
    return 0.5 * sum(v**4 - 16.0 * v * v + 5.0 * v for v in _xs(p))


def ackley(p):
    x = _xs(p)
    d = len(x)
    sq = sum(v * v for v in x) / d
    cs = sum(math.cos(2.0 * math.pi * v) for v in x) / d
    return -20.0 * math.exp(-0.2 * math.sqrt(sq)) - math.exp(cs) + 20.0 + math.e


def nnlike(p):
    _, best_log_lr, offset = next(o for o in NN_OPTIMIZERS if o[0] == p["optimizer"])
    n_layers = float(p["n_layers"])
    return (
        offset
        + 0.5 * (math.log10(p["lr"]) - best_log_lr) ** 2
        + 0.08 * (n_layers - 4.0) ** 2
        + 0.05 * (math.log2(float(p["width"])) - 7.0) ** 2
        + 3.0 * (p["dropout"] - 0.05 * n_layers) ** 2
    )


def _box(d, low, high):
    from optuna.distributions import FloatDistribution

    return {"x%d" % i: FloatDistribution(low, high) for i in range(d)}


def functions():
    """name -> (objective, search space as Optuna distributions, known minimum, description)."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    from_ = FloatDistribution
    return {
        "branin": (
            branin,
            {"x0": from_(-5.0, 10.0), "x1": from_(0.0, 15.0)},
            0.397887357729738,
            "2-D, x0 in [-5, 10], x1 in [0, 15]",
        ),
        "hartmann6": (hartmann6, _box(6, 0.0, 1.0), -3.32236801141551, "6-D, [0, 1]^6"),
        "rosenbrock4": (rosenbrock, _box(4, -5.0, 10.0), 0.0, "4-D, [-5, 10]^4"),
        "styblinski_tang10": (
            styblinski_tang,
            _box(10, -5.0, 5.0),
            -39.16616570377142 * 10.0,
            "10-D, [-5, 5]^10",
        ),
        "ackley5": (ackley, _box(5, -32.768, 32.768), 0.0, "5-D, [-32.768, 32.768]^5"),
        "nnlike_mixed": (
            nnlike,
            {
                "lr": FloatDistribution(1e-5, 1e-1, log=True),
                "n_layers": IntDistribution(2, 12, step=2),
                "width": IntDistribution(16, 512, log=True),
                "optimizer": CategoricalDistribution([o[0] for o in NN_OPTIMIZERS]),
                "dropout": FloatDistribution(0.0, 0.6),
            },
            0.0,
            "5 params: lr float log [1e-5, 1e-1], n_layers int [2, 12] step 2, "
            "width int log [16, 512], optimizer categorical {sgd, adam, rmsprop} "
            "(offsets 0.3/0/0.1, best lr 10^-1.5/10^-3/10^-3.5), dropout float [0, 0.6] "
            "(best 0.05 x n_layers)",
        ),
    }


# ----------------------------------------------------------------------------------------------
# Helpers


def log(msg):
    print("[search_bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


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


def machine_info():
    cpu = "unknown"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return "unknown"

    import optuna

    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "arch": platform.machine(),
        "cpu": cpu,
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "optuna": optuna.__version__,
        "rustc": out(["rustc", "--version"]),
        "placeholder_tpe": tpe_is_placeholder(),
        "loadavg": os.getloadavg(),
    }


def source_state():
    """The commit the binaries are built from, read before building."""

    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT).stdout.strip()
        except OSError:
            return "unknown"

    commit = out(["git", "rev-parse", "--short", "HEAD"]) or "unknown"
    dirty = out(["git", "status", "--porcelain", "--untracked-files=no", "--", "src", "Cargo.toml",
                 "Cargo.lock", "migrations"])
    return commit + (" + uncommitted changes in src/" if dirty else "")


def machine_lines(info, load_end):
    return [
        "- Date: %s" % info["date_utc"],
        "- Machine: `%s`, %s, nproc %s, Linux %s"
        % (info["arch"], info["cpu"], info["nproc"], info["kernel"]),
        "- Software: sweepd %s (release build), %s, Python %s, Optuna %s"
        % (info["commit"], info["rustc"], info["python"], info["optuna"]),
        "- Load average (1/5/15 min) at start %s, at end %s: other work on the machine inflates "
        "timings, never the quality figures"
        % ("/".join("%.2f" % x for x in info["loadavg"]), "/".join("%.2f" % x for x in load_end)),
    ]


def write_section(marker, body):
    """Replaces the text between <!-- bench:MARKER --> and <!-- /bench:MARKER --> in the doc
    (appending the section if absent), re-reading the file just before writing."""
    start, end = "<!-- bench:%s -->" % marker, "<!-- /bench:%s -->" % marker
    block = "%s\n%s\n%s" % (start, body.strip("\n"), end)
    DOC.parent.mkdir(parents=True, exist_ok=True)
    text = DOC.read_text() if DOC.exists() else DOC_INTRO
    i, j = text.find(start), text.find(end)
    if i >= 0 and j > i:
        text = text[:i] + block + text[j + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, DOC)
    log("wrote section %s of %s" % (marker, DOC.relative_to(ROOT)))


def save_raw(name, data):
    RAW_DIR.mkdir(parents=True, exist_ok=True)
    path = RAW_DIR / name
    path.write_text(json.dumps(data))
    log("raw results: %s" % path.relative_to(ROOT))


def cargo_build(args, what):
    if args.no_build:
        return
    cargo = os.environ.get("CARGO", "cargo")
    cmd = [cargo, "build", "--release"] + what
    if args.target_dir:
        cmd += ["--target-dir", str(args.target_dir)]
    log(" ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True)


def target_dir(args):
    return Path(args.target_dir) if args.target_dir else ROOT / "target"


def tpe_is_placeholder():
    try:
        return "PLACEHOLDER" in (ROOT / "src" / "sampler" / "tpe" / "mod.rs").read_text()[:2000]
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------
# Benchmark 1: sampler quality

SAMPLERS = ["sweepd-tpe", "optuna-tpe", "sweepd-random", "optuna-random"]


def check_functions(example):
    """The Rust and Python definitions must agree: same spaces, same values on random points."""
    from optuna.distributions import json_to_distribution

    funcs = functions()
    listed = subprocess.run([str(example), "--list"], capture_output=True, text=True, check=True)
    rust = {}
    for line in listed.stdout.splitlines():
        d = json.loads(line)
        rust[d["func"]] = d
    if sorted(rust) != sorted(funcs):
        raise SystemExit("function sets differ: rust %s, python %s" % (sorted(rust), sorted(funcs)))
    queries, expected = [], []
    rng = random.Random(12345)
    for name, (f, space, optimum, _) in funcs.items():
        rspace = {p["name"]: json_to_distribution(json.dumps(p["distribution"])) for p in rust[name]["params"]}
        if rspace != space:
            raise SystemExit("%s: spaces differ:\n rust   %s\n python %s" % (name, rspace, space))
        if not math.isclose(rust[name]["optimum"], optimum, rel_tol=1e-12):
            raise SystemExit("%s: optimum differs" % name)
        for _ in range(40):
            p = {}
            for pname, dist in space.items():
                p[pname] = _random_value(dist, rng)
            queries.append(json.dumps({"func": name, "params": p}))
            expected.append(f(p))
    evald = subprocess.run(
        [str(example), "--eval"], input="\n".join(queries) + "\n", capture_output=True, text=True, check=True
    )
    got = [json.loads(line)["value"] for line in evald.stdout.splitlines()]
    assert len(got) == len(expected)
    worst = 0.0
    for q, a, b in zip(queries, got, expected):
        err = abs(a - b) / max(1.0, abs(b))
        worst = max(worst, err)
        if err > 1e-9:
            raise SystemExit("Rust and Python disagree on %s: %r vs %r" % (q, a, b))
    log("Rust and Python functions agree on %d points (max rel. error %.1e)" % (len(got), worst))
    return worst


def _random_value(dist, rng):
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    if isinstance(dist, CategoricalDistribution):
        return rng.choice(dist.choices)
    if isinstance(dist, FloatDistribution):
        if dist.log:
            return math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
        return rng.uniform(dist.low, dist.high)
    if dist.log:
        return int(round(math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))))
    return dist.low + dist.step * rng.randrange((dist.high - dist.low) // dist.step + 1)


def _optuna_worker_init():
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")


def optuna_run(job):
    """One sequential Optuna run (ask/evaluate/tell, in-memory storage)."""
    import optuna

    name, sampler_name, seed, trials = job
    f, space, _, _ = functions()[name]
    if sampler_name == "optuna-tpe":
        # Optuna 5.0's defaults (multivariate=None resolves to True for single-objective
        # studies; constant_liar=True), spelled out.
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    best, curve, ask_s, tell_s = math.inf, [], 0.0, 0.0
    for _ in range(trials):
        t0 = time.perf_counter()
        trial = study.ask(fixed_distributions=space)  # samples every param
        t1 = time.perf_counter()
        value = f(trial.params)
        t2 = time.perf_counter()
        study.tell(trial, value)
        t3 = time.perf_counter()
        ask_s += t1 - t0
        tell_s += t3 - t2
        best = min(best, value)
        curve.append(best)
    return {"func": name, "sampler": sampler_name, "seed": seed, "trials": trials,
            "curve": curve, "ask_s": ask_s, "tell_s": tell_s}


def run_sweepd_samplers(example, names, args):
    """sweepd's samplers, `args.jobs` example processes at once (functions split between them)."""
    groups = [names[i :: args.jobs] for i in range(args.jobs)]
    procs = []
    for g in groups:
        if not g:
            continue
        cmd = [str(example), "--funcs", ",".join(g), "--samplers", "random,tpe",
               "--seeds", str(args.seeds), "--trials", str(args.trials)]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit("sampler_bench failed with status %d" % p.returncode)
        results += [json.loads(line) for line in out.splitlines()]
    return results


def bench_sampler(args, source):
    info = dict(machine_info(), commit=source)
    t_start = time.perf_counter()
    cargo_build(args, ["--example", "sampler_bench"])
    example = target_dir(args) / "release" / "examples" / "sampler_bench"
    max_err = check_functions(example)
    funcs = functions()
    names = list(funcs)

    log("sweepd samplers: %d functions x %d seeds x %d trials" % (len(names), args.seeds, args.trials))
    t0 = time.perf_counter()
    results = run_sweepd_samplers(example, names, args)
    sweepd_wall = time.perf_counter() - t0

    jobs = [(n, s, seed, args.trials) for n in names for s in ("optuna-tpe", "optuna-random")
            for seed in range(args.seeds)]
    log("Optuna samplers: %d runs on %d processes" % (len(jobs), args.jobs))
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(args.jobs, initializer=_optuna_worker_init) as ex:
        for i, r in enumerate(ex.map(optuna_run, jobs, chunksize=1)):
            results.append(r)
            if (i + 1) % 40 == 0:
                log("  %d/%d Optuna runs" % (i + 1, len(jobs)))
    optuna_wall = time.perf_counter() - t0
    total_wall = time.perf_counter() - t_start

    raw = {"info": info, "args": vars(args), "results": results, "max_err": max_err,
           "sweepd_wall": sweepd_wall, "optuna_wall": optuna_wall, "total_wall": total_wall,
           "load_end": os.getloadavg()}
    save_raw("search_bench-sampler.json", raw)
    body = render_sampler_raw(raw)
    if args.no_doc:
        print(body)
    else:
        write_section("sampler", body)
    return body


def render_sampler_raw(raw):
    funcs = functions()
    return render_sampler(raw["results"], list(funcs), funcs, argparse.Namespace(**raw["args"]), raw["info"],
                          raw["max_err"], raw["sweepd_wall"], raw["optuna_wall"], raw["total_wall"],
                          raw["load_end"], raw["info"].get("placeholder_tpe", False))


def render_sampler(results, names, funcs, args, info, max_err, sweepd_wall, optuna_wall, total_wall,
                   load_end, placeholder):
    checkpoints = sorted({min(args.trials // 2, args.trials), args.trials})
    by = {}
    for r in results:
        by.setdefault((r["func"], r["sampler"]), []).append(r)
    L = []
    L.append("## Sampler quality: sweepd TPE vs Optuna TPE vs random")
    L.append("")
    if placeholder:
        L.append("> **PLACEHOLDER TPE**: `src/sampler/tpe/mod.rs` still held the random placeholder when this ran, "
                 "so the sweepd-tpe rows are random sampling. Re-run `make bench` once TPE lands.")
        L.append("")
    L += machine_lines(info, load_end)
    L.append("- Command: `make bench` (runs `.venv/bin/python bench/search_bench.py all`); this "
             "section alone: `.venv/bin/python bench/search_bench.py sampler --seeds %d --trials %d --jobs %d`"
             % (args.seeds, args.trials, args.jobs))
    L.append("- Runtime: %.0f s in all (sweepd samplers %.1f s, Optuna samplers %.0f s, %d processes)"
             % (total_wall, sweepd_wall, optuna_wall, args.jobs))
    L.append("")
    L.append("**Protocol.** Each function is minimized from seeds 0..%d, %d trials per run, one trial "
             "at a time (ask, evaluate in-process, tell; no daemon, no database). The value reported "
             "is the best objective value found after %s trials; lower is better. Samplers:"
             % (args.seeds - 1, args.trials, " and ".join(str(c) for c in checkpoints)))
    L.append("")
    L.append("- `sweepd-tpe`: `sweepd::sampler::build(Tpe, ...)` with the defaults of `[sampler]`: "
             "`n_startup_trials = 10`, `n_ei_candidates = 24`, `multivariate = true`, "
             "`constant_liar = true` (moot here: trials run one at a time), `seed = s`; driven by "
             "`bench/sampler_bench.rs` through the calls the daemon makes (`sample` keyed by the "
             "trial number, `observe`, `tell`).")
    L.append("- `optuna-tpe`: `optuna.samplers.TPESampler(seed=s, multivariate=True, constant_liar=True)`. "
             "These are Optuna %s's defaults (`multivariate=None` resolves to True for a "
             "single-objective study; `constant_liar` defaults to True), so this is both the default "
             "and the like-for-like configuration; `n_startup_trials=10`, `n_ei_candidates=24` are "
             "Optuna's defaults too." % info["optuna"])
    L.append("- `sweepd-random`, `optuna-random`: `RandomSampler` with `seed = s`.")
    L.append("- Optuna runs use `study.ask(fixed_distributions=space)` / `study.tell` with in-memory "
             "storage.")
    L.append("")
    L.append("**Functions** (all minimized; defined identically in `bench/sampler_bench.rs` and "
             "`bench/search_bench.py`, checked before each run: same Optuna distributions, same values "
             "on 240 random points to a relative error of %.0e):" % max(max_err, 1e-16))
    L.append("")
    L.append("| function | search space | known minimum |")
    L.append("|---|---|---|")
    for n in names:
        L.append("| `%s` | %s | %s |" % (n, funcs[n][3], fmt(funcs[n][2])))
    L.append("")
    L.append("### Best value found: median [25%, 75%] over the seeds")
    L.append("")
    hdr = "| function | sampler | " + " | ".join("best@%d" % c for c in checkpoints) + " | ms/ask (mean) |"
    L.append(hdr)
    L.append("|---|---|" + "---|" * (len(checkpoints) + 1))
    summary = {}
    for n in names:
        for s in SAMPLERS:
            runs = by.get((n, s), [])
            if not runs:
                continue
            cells = []
            for c in checkpoints:
                vals = [r["curve"][c - 1] for r in runs]
                cells.append("%s [%s, %s]" % (fmt(percentile(vals, 50)), fmt(percentile(vals, 25)),
                                              fmt(percentile(vals, 75))))
            ask_ms = 1e3 * sum(r["ask_s"] for r in runs) / sum(r["trials"] for r in runs)
            summary[(n, s)] = {
                "final": [r["curve"][-1] for r in runs],
                "median_final": percentile([r["curve"][-1] for r in runs], 50),
                "ask_ms": ask_ms,
            }
            label = "**%s**" % s if s == "sweepd-tpe" else s
            L.append("| `%s` | %s | %s | %s |" % (n, label, " | ".join(cells), fmt(ask_ms)))
    L.append("")
    L.append("ms/ask: wall time of `sample` + `observe` (sweepd, Rust) or `study.ask` with every "
             "param sampled (Optuna, Python), averaged over all %d trials of all runs, %d runs in "
             "parallel on the machine's %s cores." % (args.trials, args.jobs, info["nproc"]))
    L.append("")

    # Summary: medians and the probability that sweepd TPE's final best beats the other sampler's.
    T = args.trials
    L.append("### Summary (best@%d)" % T)
    L.append("")
    L.append("P(sweepd-tpe < X): the probability that a sweepd-tpe run ends lower than a run of X "
             "(0.5 = no difference, 1 = always lower; the Mann-Whitney common-language effect size "
             "over the %d x %d pairs of runs)." % (args.seeds, args.seeds))
    L.append("")
    L.append("| function | sweepd-tpe median | optuna-tpe median | P(sweepd-tpe < optuna-tpe) | "
             "P(sweepd-tpe < sweepd-random) | P(sweepd-tpe < optuna-random) |")
    L.append("|---|---|---|---|---|---|")
    le_opt, lt_rand, lt_orand, worse = 0, 0, 0, []
    rand_weak = []
    for n in names:
        st, ot = summary[(n, "sweepd-tpe")], summary[(n, "optuna-tpe")]
        sr, orr = summary[(n, "sweepd-random")], summary[(n, "optuna-random")]
        p_ot = prob_less(st["final"], ot["final"])
        p_sr = prob_less(st["final"], sr["final"])
        p_or = prob_less(st["final"], orr["final"])
        if st["median_final"] <= ot["median_final"]:
            le_opt += 1
        else:
            worse.append((n, st["median_final"], ot["median_final"], p_ot))
        if st["median_final"] < sr["median_final"]:
            lt_rand += 1
        if st["median_final"] < orr["median_final"]:
            lt_orand += 1
        if p_sr < 0.75 or p_or < 0.75:
            rand_weak.append((n, p_sr, p_or))
        L.append("| `%s` | %s | %s | %.2f | %.2f | %.2f |" % (n, fmt(st["median_final"]), fmt(ot["median_final"]),
                                                           p_ot, p_sr, p_or))
    L.append("")
    k = len(names)
    L.append("**sweepd TPE's median best@%d is <= Optuna TPE's on %d of %d functions; below sweepd "
             "random's on %d of %d and below Optuna random's on %d of %d.**" % (T, le_opt, k, lt_rand, k, lt_orand, k))
    L.append("")
    if "nnlike_mixed" in names:
        L.append("`nnlike_mixed` has three basins, one per optimizer: every point with `optimizer` "
                 "sgd scores >= 0.3, with rmsprop >= 0.1, so a best value < 0.1 means the run found the "
                 "adam basin that holds the global minimum. Runs ending in the adam basin (best@%d < 0.1): " % T
                 + ", ".join("%s %d/%d" % (s_, sum(v < 0.1 for v in summary[("nnlike_mixed", s_)]["final"]),
                                         len(summary[("nnlike_mixed", s_)]["final"]))
                             for s_ in SAMPLERS if ("nnlike_mixed", s_) in summary) + ".")
        L.append("")
    L.append("### Interpretation")
    L.append("")
    if placeholder:
        L.append("- The TPE measured here is the random placeholder: the sweepd-tpe rows say nothing "
                 "about the real TPE.")
    if worse:
        L.append("- sweepd TPE's median is worse than Optuna TPE's on: " + "; ".join(
            "`%s` (%s vs %s, P(sweepd-tpe < optuna-tpe) = %.2f)" % (n, fmt(a), fmt(b), p) for n, a, b, p in worse)
            + ". A P near 0.5 means the two medians differ by less than the seed-to-seed spread; "
            "a P well below 0.5 is a real gap.")
    else:
        L.append("- sweepd TPE's median is at least as good as Optuna TPE's on every function.")
    close = [n for n in names if 0.35 <= prob_less(summary[(n, "sweepd-tpe")]["final"],
                                                   summary[(n, "optuna-tpe")]["final"]) <= 0.65]
    if close:
        L.append("- Indistinguishable from Optuna TPE at %d seeds (0.35 <= P <= 0.65): %s."
                 % (args.seeds, ", ".join("`%s`" % n for n in close)))
    if rand_weak:
        L.append("- Not clearly better than random (P < 0.75 against sweepd or Optuna random): " + "; ".join(
            "`%s` (%.2f, %.2f)" % (n, a, b) for n, a, b in rand_weak) + ".")
    else:
        L.append("- sweepd TPE beats both random samplers on every function with P >= 0.75.")
    sp = [summary[(n, "optuna-tpe")]["ask_ms"] / max(summary[(n, "sweepd-tpe")]["ask_ms"], 1e-9) for n in names]
    L.append("- Time per ask (secondary): sweepd TPE %.2f-%.2f ms, Optuna TPE %.1f-%.1f ms (%.0fx-%.0fx "
             "more); random samplers are far below both. Optuna's figure includes its trial "
             "bookkeeping in in-memory storage, sweepd's only the sampler."
             % (min(summary[(n, "sweepd-tpe")]["ask_ms"] for n in names),
                max(summary[(n, "sweepd-tpe")]["ask_ms"] for n in names),
                min(summary[(n, "optuna-tpe")]["ask_ms"] for n in names),
                max(summary[(n, "optuna-tpe")]["ask_ms"] for n in names), min(sp), max(sp)))
    L.append("- Raw runs (every best-so-far curve): `target/bench/search_bench-sampler.json`.")
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------------------------
# Benchmark 2: overhead

OVERHEAD_WORKER = '''\
import sweepd_worker


def objective(trial):
    p = trial.params
    return (float(p["x"]) - 1.5) ** 2 + 0.5 * (int(p["y"]) - 2) ** 2


sweepd_worker.serve(objective)
'''

OVERHEAD_TOML = '''\
[study]
name = "overhead"
direction = "minimize"
n_trials = {n}
sampler = "{sampler}"
seed = 1

[storage]
url = "sqlite:///sweepd.db"

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

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_cpu(pid):
    """(utime + stime) of the process itself, in seconds; None once it is gone."""
    try:
        s = open("/proc/%d/stat" % pid).read()
    except OSError:
        return None
    rest = s[s.rfind(")") + 2 :].split()
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


def _parse_ts(s):
    return datetime.datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f").timestamp()


def completion_times(db):
    con = sqlite3.connect(db)
    try:
        rows = con.execute(
            "SELECT datetime_complete FROM trials WHERE state = 'COMPLETE' ORDER BY datetime_complete"
        ).fetchall()
        states = dict(con.execute("SELECT state, COUNT(*) FROM trials GROUP BY state").fetchall())
    finally:
        con.close()
    return [_parse_ts(r[0]) for r in rows], states


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
    d = Path(workdir) / ("sweepd-%s-n%d-par%d" % (sampler, n, par))
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / "worker.py").write_text(OVERHEAD_WORKER)
    (d / "supervisor.toml").write_text(OVERHEAD_TOML.format(n=n, par=par, sampler=sampler, python=json.dumps(sys.executable)))
    time_bin = shutil.which("time", path="/usr/bin")
    cmd = [str(sweepd), "run", "-c", str(d / "supervisor.toml")]
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
    ts, states = completion_times(d / "sweepd.db")
    res = {"n": n, "par": par, "sampler": sampler, "wall_s": wall, "cpu_samples": samples, "rc": p.returncode, "interrupted": interrupted,
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


def optuna_overhead_child(args):
    """Runs in its own process: Optuna with SQLite + TPE, instant objective, timed per trial."""
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")
    sampler = optuna.samplers.TPESampler(seed=1, multivariate=True, constant_liar=True)
    t_create = time.perf_counter()
    study = optuna.create_study(storage="sqlite:///" + args.db, sampler=sampler, study_name="overhead",
                                direction="minimize")
    stamps = [time.perf_counter()]
    create_s = stamps[0] - t_create

    def objective(trial):
        x = trial.suggest_float("x", -5.0, 5.0)
        y = trial.suggest_int("y", -4, 8, step=2)
        trial.suggest_categorical("optimizer", ["adam", "sgd", "rmsprop"])
        trial.suggest_float("lr", 1e-5, 1e-1, log=True)
        return (x - 1.5) ** 2 + 0.5 * (y - 2) ** 2

    deadline = stamps[0] + args.deadline

    def cb(study, trial):
        stamps.append(time.perf_counter())
        if stamps[-1] > deadline:
            study.stop()

    error = None
    try:
        study.optimize(objective, n_trials=args.n, callbacks=[cb])
    except Exception as e:  # reported with the trials done so far, not lost
        error = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        print("Optuna stopped with %s" % error, file=sys.stderr)
    json.dump({"create_s": create_s, "stamps": [s - stamps[0] for s in stamps], "error": error},
              open(args.out, "w"))


def run_optuna_overhead(workdir, n, deadline_s):
    db = Path(workdir) / "optuna.db"
    if db.exists():
        db.unlink()
    out = Path(workdir) / "optuna-stamps.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "_optuna_overhead", "--db", str(db),
           "--n", str(n), "--deadline", str(deadline_s), "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    d = json.load(open(out))
    st = d["stamps"]  # st[k] = seconds after create_study when trial k had finished; st[0] = 0
    k = len(st) - 1
    res = {"n_target": n, "complete": k, "wall_s": wall, "optimize_s": st[-1], "create_s": d["create_s"],
           "reached": k >= n, "error": d.get("error")}
    res["cum_ms_at"] = {str(m): 1e3 * st[m] / m for m in (1000, 2000, 5000, 10000) if m <= k}
    res["win_1k_2k_ms"] = 1e3 * (st[2000] - st[1000]) / 1000 if k >= 2000 else None
    w = 1000 if k >= 3000 else max(100, k // 5)
    res["last_window"] = [k - w, k]
    res["win_last_ms"] = 1e3 * (st[k] - st[k - w]) / w if k >= w else None
    # Marginal cost in windows of 100 trials, and a straight-line fit cost(i) = a + b i over the
    # second half of the run, to extrapolate (clearly labelled) when the run stopped early.
    win = [(i + 50, 1e3 * (st[i + 100] - st[i]) / 100) for i in range(0, k - 99, 100)]
    res["windows_100"] = win
    half = [w_ for w_ in win if w_[0] >= k / 2] or win
    if len(half) >= 2:
        mx = sum(x for x, _ in half) / len(half)
        my = sum(y for _, y in half) / len(half)
        sxx = sum((x - mx) ** 2 for x, _ in half)
        b = sum((x - mx) * (y - my) for x, y in half) / sxx if sxx else 0.0
        a = my - b * mx
        res["fit_ms"] = [a, b]
        if k < n:
            extra = sum(max(a + b * (i + 0.5), 0.0) for i in range(k, n))  # ms
            res["extrapolated_total_s"] = st[-1] + extra / 1e3
            res["extrapolated_marginal_ms_at_n"] = a + b * n
    return res


def bench_overhead(args, source):
    info = dict(machine_info(), commit=source)
    t_start = time.perf_counter()
    cargo_build(args, ["--bin", "sweepd"])
    sweepd = target_dir(args) / "release" / "sweepd"
    workdir = Path(tempfile.mkdtemp(prefix="sweepd-bench-", dir=args.workdir))
    log("work directory %s" % workdir)
    sizes = [int(s) for s in args.sizes.split(",")]
    try:
        probe = []
        if args.par == "auto":
            for par in [int(x) for x in args.par_candidates.split(",")]:
                log("max_par probe: %d trials at max_par %d" % (args.probe_trials, par))
                r = run_daemon(sweepd, workdir, args.probe_trials, par, args.daemon_deadline)
                r["trials_per_s"] = r["complete"] / r["wall_s"]
                log("  %.0f trials/s" % r["trials_per_s"])
                probe.append(r)
            par = max(probe, key=lambda r: r["trials_per_s"])["par"]
        else:
            par = int(args.par)
        runs = []
        for n in sizes:
            log("sweepd: %d trials at max_par %d (deadline %.0f s)" % (n, par, args.daemon_deadline))
            r = run_daemon(sweepd, workdir, n, par, args.daemon_deadline)
            log("  %d complete in %.1f s: %.0f trials/s, daemon CPU %.3f ms/trial, peak RSS %.1f MiB"
                % (r["complete"], r["wall_s"], r["complete"] / r["wall_s"],
                   1e3 * r["daemon_cpu_s"] / max(r["complete"], 1), r["daemon_hwm_kib"] / 1024))
            runs.append(r)
        control = None
        if args.random_control:
            n = args.random_control
            log("control: sweepd with sampler random, %d trials at max_par %d" % (n, par))
            control = run_daemon(sweepd, workdir, n, par, args.daemon_deadline, sampler="random")
            log("  %d complete in %.1f s" % (control["complete"], control["wall_s"]))
        log("Optuna: SQLite + TPE, up to %d trials (deadline %.0f s)" % (args.optuna_trials, args.optuna_deadline))
        opt = run_optuna_overhead(workdir, args.optuna_trials, args.optuna_deadline)
        log("  %d trials in %.1f s" % (opt["complete"], opt["optimize_s"]))
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log("kept %s" % workdir)
    total_wall = time.perf_counter() - t_start
    raw = {"info": info, "args": vars(args), "probe": probe, "runs": runs, "control": control,
           "optuna": opt, "par": par, "total_wall": total_wall, "load_end": os.getloadavg()}
    save_raw("search_bench-overhead.json", raw)
    body = render_overhead_raw(raw)
    if args.no_doc:
        print(body)
    else:
        write_section("overhead", body)
    return body


def render_overhead_raw(raw):
    return render_overhead(raw["info"], argparse.Namespace(**raw["args"]), raw["probe"], raw["runs"],
                           raw["control"], raw["optuna"], raw["par"], raw["total_wall"], raw["load_end"])


def render_overhead(info, args, probe, runs, control, opt, par, total_wall, load_end):
    L = ["## Overhead: whole-daemon throughput vs Optuna with SQLite", ""]
    if info.get("placeholder_tpe"):
        L.append("> **PLACEHOLDER TPE**: `src/sampler/tpe/mod.rs` still held the random placeholder when this ran; "
                 "the real TPE's per-trial cost is not included. Re-run `make bench` once TPE lands.")
        L.append("")
    L += machine_lines(info, load_end)
    L.append("- Command: `make bench` (runs `.venv/bin/python bench/search_bench.py all`); this section "
             "alone: `.venv/bin/python bench/search_bench.py overhead --sizes %s --par %s "
             "--random-control %d --optuna-trials %d --optuna-deadline %.0f --daemon-deadline %.0f`"
             % (args.sizes, args.par, args.random_control, args.optuna_trials, args.optuna_deadline,
                args.daemon_deadline))
    L.append("- Runtime: %.0f s in all" % total_wall)
    L.append("")
    L.append("**Protocol.** For each size N, a fresh directory with a `supervisor.toml` (study "
             "`n_trials = N`, `sampler = \"tpe\"` with the default `[sampler]` settings, `seed = 1`, "
             "the 4-param space of the bundled example: float, int with step, categorical, log "
             "float) and persistent Python workers (`sweepd_worker.serve`, objective returns at "
             "once, no `report`), then `target/release/sweepd run -c supervisor.toml` under "
             "`/usr/bin/time -v`, timed from spawn to exit: startup, migrations, worker spawns and "
             "shutdown included. Windows are measured from the `datetime_complete` the daemon "
             "writes (the per-trial cost between the 1000th and 2000th completion, and over the "
             "last 1000). Daemon CPU and peak RSS are the daemon process's own (`/proc/PID/stat` "
             "utime+stime and `VmHWM`, polled every 0.2 s; the last 0.2 s of shutdown may be "
             "missed); `/usr/bin/time`'s max RSS is the largest of the daemon and its reaped "
             "workers.")
    L.append("")
    if probe:
        L.append("**max_par** (%d trials each; the fastest is used below): " % args.probe_trials + ", ".join(
            "max_par %d: %.0f trials/s" % (r["par"], r["trials_per_s"]) for r in probe)
            + ". **Used: max_par = %d.**" % par)
    else:
        L.append("**max_par = %d** (given)." % par)
    L.append("")
    L.append("### sweepd (whole daemon, sampler TPE, max_par %d)" % par)
    L.append("")
    L.append("| trials | wall s | trials/s | ms/trial (wall) | daemon CPU ms/trial | workers' CPU ms/trial "
             "| ms/trial, trials 1k..2k: wall / daemon CPU | ms/trial, last 1k: wall / daemon CPU "
             "| daemon peak RSS (VmHWM) | /usr/bin/time max RSS | daemon context switches/trial |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs + ([control] if control else []):
        k = max(r["complete"], 1)
        note = ""
        if r["interrupted"]:
            note = " (stopped at deadline: %d of %d)" % (r["complete"], r["n"])
        if r["sampler"] != "tpe":
            note += " **sampler %s (control)**" % r["sampler"]
        L.append("| %d%s | %.1f | %.0f | %.3f | %.3f | %.3f | %s | %s | %.1f MiB | %s | %s |" % (
            r["n"], note, r["wall_s"], r["complete"] / r["wall_s"], 1e3 * r["wall_s"] / k,
            1e3 * r["daemon_cpu_s"] / k, 1e3 * r["worker_cpu_s"] / k,
            "%s / %s" % (fmt(r["win_1k_2k_ms"]), fmt(r.get("cpu_1k_2k_ms"))),
            "%s / %s" % (fmt(r["win_last_1k_ms"]), fmt(r.get("cpu_last_1k_ms"))), r["daemon_hwm_kib"] / 1024,
            ("%.1f MiB" % (r["time_maxrss_kib"] / 1024)) if r.get("time_maxrss_kib") else "n/a",
            "%.0f" % (r.get("daemon_ctx_switches", 0) / k)))
    bad = [r for r in runs if r["states"].get("FAIL") or (r["rc"] != 0 and not r["interrupted"])]
    if bad:
        L.append("")
        L.append("**Warning:** failures in: " + "; ".join("N=%d rc=%s states=%s" % (r["n"], r["rc"], r["states"]) for r in bad))
    big = max(runs, key=lambda r: r["complete"])
    if control:
        L.append("")
        L.append("The control row runs the same study with `sampler = \"random\"`: the difference to the "
                 "TPE row of the same size is the TPE's share of the per-trial cost.")
        same = {r["n"]: r for r in runs}.get(control["n"])
        if same:
            c_t = 1e3 * same["daemon_cpu_s"] / same["complete"]
            c_r = 1e3 * control["daemon_cpu_s"] / control["complete"]
            L.append("At N = %d: daemon CPU %.3f ms/trial with TPE, %.3f with random, so about %.3f ms/trial "
                     "(%.0f%%) is the TPE and %.3f the rest of the daemon (store, protocol, scheduling)."
                     % (control["n"], c_t, c_r, c_t - c_r, 100 * (c_t - c_r) / c_t, c_r))
    if big["windows"]:
        L.append("")
        L.append("Per-trial cost along the largest run (N = %d), per 1000-trial window, ms/trial wall / daemon "
                 "CPU: " % big["n"] + ", ".join("%s: %s / %s" % (w, fmt(v), fmt(big.get("cpu_windows", {}).get(w)))
                                                for w, v in big["windows"].items()) + ".")
    L.append("")
    L.append("### Optuna %s (SQLite storage, TPESampler(multivariate=True, constant_liar=True), instant objective)"
             % info["optuna"])
    L.append("")
    L.append("`optuna.create_study(storage=\"sqlite:///<tmp>/optuna.db\", sampler=...)` then "
             "`study.optimize(objective, n_trials=%d)` in one process, the objective calling "
             "`suggest_*` for the same 4 params and returning at once, Optuna's logging at WARNING; "
             "a callback timestamps every trial and stops the study after %.0f s. A study's first "
             "1000 trials are the same whether it is asked for 1k or 10k, so the 1k figure is read "
             "from the same run." % (args.optuna_trials, args.optuna_deadline))
    L.append("")
    k = opt["complete"]
    L.append("| trials run | optimize s | ms/trial over the first 1k | ms/trial, trials 1k..2k | ms/trial, trials %d..%d |"
             % tuple(opt["last_window"]))
    L.append("|---|---|---|---|---|")
    L.append("| %d%s | %.1f | %s | %s | %s |" % (
        k, "" if opt["reached"] else (" (stopped by error: %s)" % opt["error"] if opt.get("error")
                                      else " (stopped at deadline)"), opt["optimize_s"],
        fmt(opt["cum_ms_at"].get("1000")), fmt(opt["win_1k_2k_ms"]), fmt(opt["win_last_ms"])))
    L.append("")
    if not opt["reached"] and "extrapolated_total_s" in opt:
        L.append("**Extrapolated, not measured:** a straight line fitted to Optuna's per-trial cost "
                 "over the second half of its run (%.2f ms + %.4f ms x trial number) puts a %d-trial "
                 "study at about %.0f s (%.1f ms/trial overall) and its marginal cost at trial %d at "
                 "%.0f ms." % (opt["fit_ms"][0], opt["fit_ms"][1], args.optuna_trials,
                               opt["extrapolated_total_s"], 1e3 * opt["extrapolated_total_s"] / args.optuna_trials,
                               args.optuna_trials, opt["extrapolated_marginal_ms_at_n"]))
        L.append("")
    # Ratios
    L.append("### Ratio Optuna ms/trial / sweepd ms/trial")
    L.append("")
    by_n = {r["n"]: r for r in runs}
    rows = []
    r1 = by_n.get(1000)
    if r1 and "1000" in opt["cum_ms_at"]:
        s_ms = 1e3 * r1["wall_s"] / r1["complete"]
        rows.append("| 1k | %.3f (whole run, wall) | %s (first 1000 trials) | **%.0fx** | measured |"
                    % (s_ms, fmt(opt["cum_ms_at"]["1000"]), opt["cum_ms_at"]["1000"] / s_ms))
    r10 = by_n.get(10000)
    if r10:
        s_ms = 1e3 * r10["wall_s"] / r10["complete"]
        if "10000" in opt["cum_ms_at"]:
            rows.append("| 10k | %.3f | %s | **%.0fx** | measured |" % (s_ms, fmt(opt["cum_ms_at"]["10000"]),
                                                                     opt["cum_ms_at"]["10000"] / s_ms))
        else:
            lb = opt["win_last_ms"]
            rows.append("| 10k | %.3f | >= %s (Optuna's cost per trial over trials %d..%d; it only grows) "
                        "| **>= %.0fx** | lower bound: Optuna stopped at %d trials |"
                        % (s_ms, fmt(lb), opt["last_window"][0], opt["last_window"][1], lb / s_ms, k))
            if "extrapolated_total_s" in opt:
                e_ms = 1e3 * opt["extrapolated_total_s"] / args.optuna_trials
                rows.append("| 10k | %.3f | ~%s (extrapolated, see above) | ~%.0fx | **extrapolated** |"
                            % (s_ms, fmt(e_ms), e_ms / s_ms))
    L.append("| trials | sweepd ms/trial | Optuna ms/trial | ratio | |")
    L.append("|---|---|---|---|---|")
    L += rows
    L.append("")
    # Interpretation against the targets
    L.append("### Interpretation")
    L.append("")
    if r10:
        cpu10 = 1e3 * r10["daemon_cpu_s"] / r10["complete"]
        wall10 = 1e3 * r10["wall_s"] / r10["complete"]
        L.append("- Target \"under 1 ms of supervisor time per trial at 10k trials\": the daemon spends "
                 "%.3f ms of CPU per trial and the whole system (daemon + workers, wall clock) %.3f ms "
                 "per trial: %s." % (cpu10, wall10, "met" if cpu10 < 1.0 and wall10 < 1.0 else (
                     "met for daemon CPU, not for wall time" if cpu10 < 1.0 else "NOT met")))
    sizes_first = min(by_n)
    first = by_n[sizes_first]
    last = big
    if last is not first:
        g_all = (last["wall_s"] / last["complete"]) / (first["wall_s"] / first["complete"])
        line = ("- Target \"under 2x growth from 1k to %s\": overall ms/trial went from %.3f (N = %d) to %.3f "
                "(N = %d), x%.2f" % ("100k" if last["n"] >= 100000 else "%d" % last["n"],
                                      1e3 * first["wall_s"] / first["complete"], sizes_first,
                                      1e3 * last["wall_s"] / last["complete"], last["complete"], g_all))
        if last["win_1k_2k_ms"] and last["win_last_1k_ms"]:
            g_win = last["win_last_1k_ms"] / last["win_1k_2k_ms"]
            line += ("; within the N = %d run, the last 1000 trials cost %.3f ms/trial (wall) against %.3f in "
                     "trials 1k..2k, x%.2f" % (last["n"], last["win_last_1k_ms"], last["win_1k_2k_ms"], g_win))
            g_cpu = None
            if last.get("cpu_1k_2k_ms") and last.get("cpu_last_1k_ms"):
                g_cpu = last["cpu_last_1k_ms"] / last["cpu_1k_2k_ms"]
                line += (", and %.3f against %.3f ms/trial of daemon CPU, x%.2f"
                         % (last["cpu_last_1k_ms"], last["cpu_1k_2k_ms"], g_cpu))
            ok = g_win < 2.0 and g_all < 2.0 and (g_cpu is None or g_cpu < 2.0)
            line += ": %s." % ("met" if ok else "NOT met")
        else:
            line += "."
        L.append(line)
        if last["interrupted"]:
            rate = last["complete"] / last["wall_s"]
            L.append("- **Extrapolated, not measured:** the N = %d run was stopped at its %.0f s deadline after "
                     "%d trials; at its last-1k rate (%s ms/trial) the remaining %d trials would take about %.0f s more."
                     % (last["n"], args.daemon_deadline, last["complete"], fmt(last["win_last_1k_ms"]),
                        last["n"] - last["complete"],
                        (last["n"] - last["complete"]) * (last["win_last_1k_ms"] or 1e3 / rate) / 1e3))
    L.append("- The two sides differ in more than language: sweepd writes SQLite in WAL mode with "
             "`synchronous = NORMAL` and keeps the study's state in memory; Optuna's SQLite storage "
             "runs with SQLite's defaults (`journal_mode = delete`, `synchronous = FULL`: an fsync "
             "per commit, several commits per trial) behind its `_CachedStorage`. Both are what a "
             "user gets by default on this disk. Optuna's TPE fits its Parzen estimators to every "
             "finished trial, so its sampling cost grows linearly with the study; sweepd's keeps only "
             "the newest 1000 trials in its \"above\" model past 1000 trials (`src/sampler/tpe/split.rs`) but still "
             "scans every finished trial to pick the \"below\" ones.")
    ctx_per_trial = [r["daemon_ctx_switches"] / r["complete"] for r in runs + ([control] if control else [])
                     if r.get("daemon_ctx_switches") and r["complete"]]
    L.append("- Context switches are counted over the daemon's threads (`/proc/PID/task/*/status`, "
             "voluntary + involuntary): about %s per trial. A `perf record` of the daemon taken while "
             "this benchmark was written (sampler random, around trial 15k) put about 70%% of its "
             "samples in the kernel's task-switch paths and under 1%% in SQLite's `sqlite3VdbeExec`: "
             "apart from the TPE, the daemon's per-trial cost is mostly hand-offs between its threads "
             "(tokio workers, sqlx's SQLite worker thread), not computation."
             % ("%.0f-%.0f" % (min(ctx_per_trial), max(ctx_per_trial)) if ctx_per_trial else "n/a"))
    L.append("- With an instant objective the workers' Python (JSON decode, socket round trip) is part "
             "of the wall time; %d max_par slots on %s cores keep both the daemon and the workers busy."
             % (par, info["nproc"]))
    L.append("- Raw results: `target/bench/search_bench-overhead.json`.")
    return "\n".join(L) + "\n"


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["sampler", "overhead", "all", "render", "_optuna_overhead"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)),
                    help="parallel processes for the sampler benchmark (default: min(2, nproc))")
    ap.add_argument("--sizes", default="1000,10000,100000", help="daemon run sizes")
    ap.add_argument("--par", default="auto", help="max_par, or 'auto' to probe --par-candidates")
    ap.add_argument("--par-candidates", default="1,2,4")
    ap.add_argument("--probe-trials", type=int, default=2000)
    ap.add_argument("--daemon-deadline", type=float, default=600.0,
                    help="seconds after which a daemon run is stopped (SIGINT) and extrapolated")
    ap.add_argument("--random-control", type=int, default=10000,
                    help="also run the daemon with sampler random at this size (0: no)")
    ap.add_argument("--optuna-trials", type=int, default=10000)
    ap.add_argument("--optuna-deadline", type=float, default=420.0,
                    help="seconds after which the Optuna study is stopped and extrapolated")
    ap.add_argument("--workdir", default=None, help="parent of the temporary directory (default: $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--target-dir", default=None, help="cargo target directory (default: ./target)")
    ap.add_argument("--no-doc", action="store_true", help="print the sections instead of writing the doc")
    # _optuna_overhead (internal)
    ap.add_argument("--db")
    ap.add_argument("--n", type=int)
    ap.add_argument("--deadline", type=float)
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.what == "_optuna_overhead":
        optuna_overhead_child(args)
        return
    if args.what == "render":
        # Re-renders the doc sections from the raw results of the last run (no measuring).
        for name, marker, fn in (("search_bench-sampler.json", "sampler", render_sampler_raw),
                                 ("search_bench-overhead.json", "overhead", render_overhead_raw)):
            if (RAW_DIR / name).exists():
                body = fn(json.loads((RAW_DIR / name).read_text()))
                print(body) if args.no_doc else write_section(marker, body)
        return
    source = source_state()
    if args.what in ("sampler", "all"):
        bench_sampler(args, source)
    if args.what in ("overhead", "all"):
        bench_overhead(args, source)


if __name__ == "__main__":
    main()
