#!/usr/bin/env python3
"""Sampler quality on conditional (define-by-run) search spaces: sweepd vs Optuna.

Run with the test venv's Python (Optuna 5.0 from requirements-test.txt)::

    .venv/bin/python bench/conditional_bench.py             # what `make bench` runs
    .venv/bin/python bench/conditional_bench.py --seeds 3 --trials 40 --no-doc   # smoke test

Three objectives that choose their params as they run (a model per branch, one width per
layer, an optimizer and a scheduler with params of their own), each minimized from
``--seeds`` seeds for ``--trials`` sequential trials by

- sweepd's TPE with its defaults (``multivariate = true``, ``group = false``, as Optuna's),
  by its TPE with ``group = true`` and by its random sampler, driven as the daemon drives them
  over protocol 2 (``bench/conditional_bench.rs``, no daemon);
- Optuna 5.0's ``TPESampler`` with its defaults, with ``multivariate=True, group=True``, and
  its ``RandomSampler`` (``study.ask()`` / the objective's ``trial.suggest_*`` /
  ``study.tell``, in-memory storage).

The objectives are defined identically in Rust and here; the run first checks that both
agree (same values and the same params asked, in the same order, on random trials). Writes the
section ``<!-- bench:conditional -->`` of ``docs/benchmarks.md`` and its raw results to
``target/bench/conditional_bench.json``.
"""

import argparse
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib as bl  # noqa: E402

SWEEPD = ["sweepd-tpe", "sweepd-tpe-group", "sweepd-random"]
OPTUNA = ["optuna-tpe", "optuna-tpe-group", "optuna-random"]

# ----------------------------------------------------------------------------------------------
# The objectives: the same definitions as bench/conditional_bench.rs (checked by `check`).


def branches(t):
    model = t.suggest_categorical("model", ["a", "b", "c"])
    if model == "a":
        x1 = t.suggest_float("a_x1", -5.0, 5.0)
        x2 = t.suggest_float("a_x2", -5.0, 5.0)
        return 0.5 + 0.1 * ((x1 - 1.0) ** 2 + (x2 + 2.0) ** 2)
    if model == "b":
        y = t.suggest_float("b_y", 1e-4, 1.0, log=True)
        n = t.suggest_int("b_n", 1, 20)
        return (math.log10(y) + 2.0) ** 2 + 0.05 * (n - 7.0) ** 2
    z = t.suggest_categorical("c_z", ["p", "q", "r", "s"])
    w = t.suggest_float("c_w", 0.0, 1.0)
    return 0.6 + (0.0 if z == "r" else 1.0) + 4.0 * (w - 0.3) ** 2


def layers(t):
    n = t.suggest_int("n_layers", 1, 4)
    v = 0.3 * (n - 3.0) ** 2
    for i in range(n):
        u = t.suggest_int("n_units_l%d" % i, 4, 256, log=True)
        v += 0.1 * (math.log2(u) - (5.0 + i)) ** 2
    lr = t.suggest_float("lr", 1e-5, 1e-1, log=True)
    dropout = t.suggest_float("dropout", 0.0, 0.5)
    return v + 0.5 * (math.log10(lr) + 3.0) ** 2 + 2.0 * (dropout - 0.1 * n) ** 2


def pipeline(t):
    lr = t.suggest_float("lr", 1e-5, 1.0, log=True)
    if t.suggest_categorical("optimizer", ["sgd", "adam"]) == "sgd":
        m = t.suggest_float("momentum", 0.0, 0.99)
        nesterov = t.suggest_categorical("nesterov", ["no", "yes"])
        v = (0.3 + 0.5 * (math.log10(lr) + 1.0) ** 2 + 3.0 * (m - 0.9) ** 2
             + (0.0 if nesterov == "yes" else 0.2))
    else:
        b1 = t.suggest_float("beta1", 0.5, 0.999)
        eps = t.suggest_float("eps", 1e-10, 1e-6, log=True)
        v = (0.5 * (math.log10(lr) + 3.0) ** 2 + 10.0 * (b1 - 0.9) ** 2
             + 0.1 * (math.log10(eps) + 8.0) ** 2)
    sched = t.suggest_categorical("scheduler", ["none", "cosine", "step"])
    if sched == "none":
        v += 0.4
    elif sched == "cosine":
        v += 0.1
    else:
        size = t.suggest_int("step_size", 1, 50)
        gamma = t.suggest_float("gamma", 0.1, 0.9)
        v += 0.002 * (size - 20.0) ** 2 + (gamma - 0.5) ** 2
    return v


FUNCS = {
    "branches": (branches, 0.0, "`model` in {a, b, c}; a: two floats (best 0.5); b: a log float "
                 "and an int (the only branch that reaches 0); c: a categorical of 4 and a float "
                 "(best 0.6)"),
    "layers": (layers, 0.0, "`n_layers` int [1, 4], then `n_units_l{i}` int log [4, 256] per "
               "layer (best 2^(5+i)), `lr` log, `dropout` (best 0.1 x n_layers)"),
    "pipeline": (pipeline, 0.1, "`lr` log; `optimizer` sgd (momentum, nesterov) or adam (beta1, "
                 "eps log), the best lr depending on it; `scheduler` none / cosine / step "
                 "(step_size int, gamma)"),
}


class Recorder:
    """A trial that draws at random and records what was asked, in order."""

    def __init__(self, rng):
        self.rng, self.params, self.asked = rng, {}, []

    def _keep(self, name, value):
        self.asked.append(name)
        self.params[name] = value
        return value

    def suggest_float(self, name, low, high, log=False):
        if log:
            x = math.exp(self.rng.uniform(math.log(low), math.log(high)))
            return self._keep(name, min(max(x, low), high))
        return self._keep(name, self.rng.uniform(low, high))

    def suggest_int(self, name, low, high, log=False):
        return self._keep(name, self.rng.randint(low, high))

    def suggest_categorical(self, name, choices):
        return self._keep(name, self.rng.choice(choices))


def check(example):
    """Rust and Python must agree: the same value and the same params asked, in order."""
    rng = random.Random(2024)
    queries, expected = [], []
    for name, (f, _, _) in FUNCS.items():
        for _ in range(100):
            rec = Recorder(rng)
            value = f(rec)
            queries.append(json.dumps({"func": name, "params": rec.params}))
            expected.append((value, rec.asked))
    out = subprocess.run([str(example), "--eval"], input="\n".join(queries) + "\n",
                         capture_output=True, text=True, check=True)
    got = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(got) == len(expected)
    worst = 0.0
    for q, g, (value, asked) in zip(queries, got, expected):
        err = abs(g["value"] - value) / max(1.0, abs(value))
        worst = max(worst, err)
        if err > 1e-9 or g["asked"] != asked:
            raise SystemExit("Rust and Python disagree on %s: %r vs %r" % (q, g, (value, asked)))
    bl.log("Rust and Python objectives agree on %d trials (max rel. error %.1e)"
           % (len(got), worst))
    return worst


def optuna_run(job):
    import optuna

    name, sampler_name, seed, trials = job
    f = FUNCS[name][0]
    if sampler_name == "optuna-tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)  # Optuna 5.0's defaults
    elif sampler_name == "optuna-tpe-group":
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    best, curve = math.inf, []
    for _ in range(trials):
        trial = study.ask()
        value = f(trial)
        study.tell(trial, value)
        best = min(best, value)
        curve.append(best)
    return {"func": name, "sampler": sampler_name, "seed": seed, "trials": trials, "curve": curve}


def _init():
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.simplefilter("ignore")


def run(args):
    info = dict(bl.machine_info(), commit=bl.source_state())
    t0 = time.perf_counter()
    bl.cargo_build(args, ["--example", "conditional_bench", "--bin", "sweepd"])
    example = bl.target_dir(args) / "release" / "examples" / "conditional_bench"
    max_err = check(example)
    names = list(FUNCS)
    bl.log("sweepd samplers: %d functions x %d seeds x %d trials" % (len(names), args.seeds, args.trials))
    procs = [subprocess.Popen([str(example), "--funcs", n, "--seeds", str(args.seeds),
                               "--trials", str(args.trials)], stdout=subprocess.PIPE, text=True)
             for n in names]
    results = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit("conditional_bench failed with status %d" % p.returncode)
        results += [json.loads(line) for line in out.splitlines()]
    sweepd_wall = time.perf_counter() - t0
    jobs = [(n, s, seed, args.trials) for n in names for s in OPTUNA for seed in range(args.seeds)]
    bl.log("Optuna samplers: %d runs on %d processes" % (len(jobs), args.jobs))
    t1 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(args.jobs, initializer=_init) as ex:
        results += list(ex.map(optuna_run, jobs, chunksize=1))
    optuna_wall = time.perf_counter() - t1
    raw = {"info": info, "args": vars(args), "results": results, "max_err": max_err,
           "sweepd_wall": sweepd_wall, "optuna_wall": optuna_wall,
           "total_wall": time.perf_counter() - t0, "load_end": os.getloadavg(),
           "internals": bl.internals(bl.target_dir(args) / "release" / "sweepd")}
    bl.save_raw("conditional_bench.json", raw)
    bl.publish("conditional", render(raw), args.no_doc)


def render(raw):
    args = argparse.Namespace(**raw["args"])
    info = raw["info"]
    T = args.trials
    checkpoints = sorted({T // 2, T})
    by = {}
    for r in raw["results"]:
        by.setdefault((r["func"], r["sampler"]), []).append(r["curve"])
    L = ["## Sampler quality on conditional (define-by-run) spaces", ""]
    L += bl.machine_lines(info, raw["load_end"])
    L.append("- Command: `make bench` (runs `.venv/bin/python bench/conditional_bench.py`); this "
             "section alone: `.venv/bin/python bench/conditional_bench.py --seeds %d --trials %d "
             "--jobs %d`" % (args.seeds, T, args.jobs))
    L.append("- Runtime: %.0f s in all (sweepd samplers %.1f s, Optuna samplers %.0f s)"
             % (raw["total_wall"], raw["sweepd_wall"], raw["optuna_wall"]))
    L.append("")
    tpe = bl.internal(raw.get("internals") or bl.internals(), "defaults.sampler")
    L.append("**What is measured.** Each objective below chooses its params as it runs "
             "(`trial.suggest_*` behind branches and loops) and is minimized from seeds 0..%d, %d "
             "trials per run, one at a time; the figure is the best value after %s trials (lower "
             "is better). sweepd's samplers are driven by `bench/conditional_bench.rs` through the "
             "calls the daemon makes over protocol 2 (`propose` with no `[params]`, each suggest "
             "answered from the relative values or by `suggest`, then `observe` and `tell`); "
             "Optuna's by `study.ask()`, the objective and `study.tell`. `sweepd-tpe` has the "
             "`[sampler]` defaults, which are Optuna's (`multivariate = true`, `group = false`, "
             "`n_startup_trials = %d`, `n_ei_candidates = %d`); `optuna-tpe` is Optuna %s's "
             "`TPESampler(seed=s)`; the `-group` rows add `group = true` (Optuna: "
             "`multivariate=True, group=True`), relative sampling per group of params that always "
             "occur together; both random samplers are `RandomSampler(seed=s)`. The objectives are "
             "defined identically in `bench/conditional_bench.rs` and `bench/conditional_bench.py`, "
             "checked before each run (the same values and the same params asked in the same order "
             "on 300 random trials, to a relative error of %.0e)."
             % (args.seeds - 1, T, " and ".join(map(str, checkpoints)), tpe["n_startup_trials"],
                tpe["n_ei_candidates"], info["optuna"], max(raw["max_err"], 1e-16)))
    L.append("")
    L.append("| objective | params | known minimum |")
    L.append("|---|---|---|")
    for n, (_, opt, desc) in FUNCS.items():
        L.append("| `%s` | %s | %s |" % (n, desc, bl.fmt(opt)))
    L.append("")
    L.append("### Best value found: median [25%, 75%] over the seeds")
    L.append("")
    L.append("| objective | sampler | " + " | ".join("best@%d" % c for c in checkpoints) + " |")
    L.append("|---|---|" + "---|" * len(checkpoints))
    final = {}
    for n in FUNCS:
        for s in SWEEPD + OPTUNA:
            curves = by.get((n, s), [])
            if not curves:
                continue
            cells = []
            for c in checkpoints:
                vals = [cv[c - 1] for cv in curves]
                cells.append("%s [%s, %s]" % (bl.fmt(bl.percentile(vals, 50)),
                                              bl.fmt(bl.percentile(vals, 25)),
                                              bl.fmt(bl.percentile(vals, 75))))
            final[(n, s)] = [cv[-1] for cv in curves]
            label = "**%s**" % s if s == "sweepd-tpe" else s
            L.append("| `%s` | %s | %s |" % (n, label, " | ".join(cells)))
    L.append("")
    L.append("### Summary (best@%d)" % T)
    L.append("")
    L.append("P(A < B): the probability that a run of A ends lower than a run of B (0.5 = no "
             "difference, 1 = always lower; the Mann-Whitney common-language effect size over "
             "the %d x %d pairs of runs)." % (args.seeds, args.seeds))
    L.append("")
    L.append("| objective | sweepd-tpe | optuna-tpe | P(sweepd-tpe < optuna-tpe) | "
             "sweepd-tpe-group | optuna-tpe-group | P(group: sweepd < optuna) | "
             "P(sweepd-tpe < sweepd-random) | P(sweepd-tpe < optuna-random) |")
    L.append("|---|---|---|---|---|---|---|---|---|")
    med = lambda n, s: bl.percentile(final[(n, s)], 50)  # noqa: E731
    P = lambda n, a, b: bl.prob_less(final[(n, a)], final[(n, b)])  # noqa: E731
    at_least, vs_random, close = 0, 0, 0
    for n in FUNCS:
        p_default = P(n, "sweepd-tpe", "optuna-tpe")
        p_rand = min(P(n, "sweepd-tpe", "sweepd-random"), P(n, "sweepd-tpe", "optuna-random"))
        at_least += med(n, "sweepd-tpe") <= med(n, "optuna-tpe")
        close += p_default >= 0.35
        vs_random += p_rand >= 0.75
        L.append("| `%s` | %s | %s | %.2f | %s | %s | %.2f | %.2f | %.2f |" % (
            n, bl.fmt(med(n, "sweepd-tpe")), bl.fmt(med(n, "optuna-tpe")), p_default,
            bl.fmt(med(n, "sweepd-tpe-group")), bl.fmt(med(n, "optuna-tpe-group")),
            P(n, "sweepd-tpe-group", "optuna-tpe-group"), P(n, "sweepd-tpe", "sweepd-random"),
            P(n, "sweepd-tpe", "optuna-random")))
    L.append("")
    k = len(FUNCS)
    reading = ("sweepd TPE's median best@%d is at most Optuna's default TPE's on %d of %d "
               "objectives, with P(sweepd-tpe < optuna-tpe) at least 0.35 (no real gap at %d "
               "seeds) on %d of %d, and it beats both random samplers with P >= 0.75 on %d of %d."
               % (T, at_least, k, args.seeds, close, k, vs_random, k))
    behind = [(n, P(n, "sweepd-tpe", "optuna-tpe")) for n in FUNCS
              if P(n, "sweepd-tpe", "optuna-tpe") < 0.5]
    if behind:
        reading += (" With the defaults sweepd is behind Optuna (P < 0.5) on %s: a P within "
                    "0.35..0.65 is inside the seed-to-seed spread, not a measured gap."
                    % ", ".join("`%s` (%.2f)" % x for x in behind))
    gaps = [(n, P(n, "sweepd-tpe-group", "optuna-tpe-group")) for n in FUNCS
            if P(n, "sweepd-tpe-group", "optuna-tpe-group") < 0.35]
    if gaps:
        reading += (" With `group` it ends behind Optuna's (P < 0.35) on %s; the group "
                    "decomposition and the estimators are Optuna's (checked to 1e-9), so that is "
                    "the random streams and the spread of the seeds, or a difference not found yet."
                    % ", ".join("`%s` (%.2f)" % x for x in gaps))
    reading += (" `group` changes little for either implementation on these objectives, which is "
                "why sweepd keeps Optuna's default, `group = false`.")
    L.append("**Reading.** " + reading)
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--no-build", action="store_true", help="use the example already built")
    ap.add_argument("--target-dir", default=None, help="cargo target directory (default: ./target)")
    ap.add_argument("--no-doc", action="store_true", help="print the section instead of writing it")
    ap.add_argument("--render", action="store_true", help="rewrite the section from the raw results")
    args = ap.parse_args()
    if args.render:
        bl.publish("conditional", render(bl.load_raw("conditional_bench.json")), args.no_doc)
        return
    run(args)


if __name__ == "__main__":
    main()
