#!/usr/bin/env python3
"""Benchmark of sweepd's samplers with two objectives, against Optuna's.

Run with the test venv's Python (Optuna 5.0 from requirements-test.txt)::

    .venv/bin/python bench/multi_bench.py                 # what `make bench` runs
    .venv/bin/python bench/multi_bench.py --seeds 2 --no-doc   # smoke test
    .venv/bin/python bench/multi_bench.py --render        # rewrite the doc from target/bench/

Four problems, both objectives minimized: ZDT1 and ZDT2 (10 variables), DTLZ2 with two
objectives (10 variables) and a mixed problem (a float, an int, a log int and a categorical
with its own trade-off). Each is run for ``--trials`` sequential trials from ``--seeds``
seeds by sweepd's NSGA-II and multi-objective TPE (``bench/multi_bench.rs``, the samplers
driven directly) and by Optuna's ``NSGAIISampler`` and ``TPESampler`` (ask/tell, in-memory
storage), all with their defaults. Quality is the hypervolume of the trials' values after 100
and after ``--trials`` trials, computed for every sampler by Optuna's own
``compute_hypervolume`` against a fixed reference point per problem; cost is the time of one
proposal (sweepd: ``Sampler::sample``; Optuna: ``study.ask`` with the distributions, which
samples every param).

Writes its section of ``docs/benchmarks.md`` (between ``<!-- bench:multi -->`` and
``<!-- /bench:multi -->``) and its raw results to ``target/bench/multi.json``.

More seeds for some cells, after the main run (fresh seeds, so an independent sample)::

    .venv/bin/python bench/multi_bench.py --more --algos nsga2 --first-seed 20 --seeds 200
    .venv/bin/python bench/multi_bench.py --more --algos tpe --problems dtlz2 --first-seed 20 --seeds 100

Each ``--more`` run adds its cells to ``target/bench/multi_more.json`` (replacing a cell run
before from the same first seed) and the section is rendered again from both files, the extra
cells in a table of their own with confidence intervals.
"""

import argparse
import concurrent.futures
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402

ROOT = bl.ROOT
DIMS = 10
MIXED_CHOICES = [("a", 0.0, 0.5), ("b", 0.5, 0.0), ("c", 0.2, 0.2), ("d", 0.6, 0.6)]
PROBLEMS = ["zdt1", "zdt2", "dtlz2", "mixed"]
# A point every problem's values stay below (the worst a random start reaches), so that the
# hypervolume measures the whole front found, not only its best corner.
REFERENCE = {
    "zdt1": (1.1, 11.0),
    "zdt2": (1.1, 11.0),
    "dtlz2": (3.6, 3.6),
    "mixed": (2.5, 2.6),
}
SAMPLERS = ["sweepd-nsga2", "optuna-nsga2", "sweepd-tpe", "optuna-tpe"]


# ----------------------------------------------------------------------------------------------
# The problems: the same definitions as bench/multi_bench.rs (checked by `check_agreement`).

def evaluate(problem, p):
    if problem == "mixed":
        x, n, k = p["x"], p["n"], p["k"]
        _, c1, c2 = next(c for c in MIXED_CHOICES if c[0] == p["c"])
        return [x + 0.1 * abs(n - 3) + c1,
                (1 - x) ** 2 + 0.05 * abs(math.log2(k) - 4) + c2]
    x = [p["x%d" % i] for i in range(DIMS)]
    if problem in ("zdt1", "zdt2"):
        f1 = x[0]
        g = 1 + 9 * sum(x[1:]) / (DIMS - 1)
        h = 1 - math.sqrt(f1 / g) if problem == "zdt1" else 1 - (f1 / g) ** 2
        return [f1, g * h]
    if problem == "dtlz2":
        g = sum((v - 0.5) ** 2 for v in x[1:])
        a = x[0] * math.pi / 2
        return [(1 + g) * math.cos(a), (1 + g) * math.sin(a)]
    raise ValueError(problem)


def distributions(problem):
    import optuna.distributions as d
    if problem == "mixed":
        return {"x": d.FloatDistribution(0, 1), "n": d.IntDistribution(1, 10),
                "k": d.IntDistribution(1, 128, log=True),
                "c": d.CategoricalDistribution([c[0] for c in MIXED_CHOICES])}
    return {"x%d" % i: d.FloatDistribution(0, 1) for i in range(DIMS)}


# ----------------------------------------------------------------------------------------------
# Runs

def optuna_run(job):
    """One (sampler, problem, seed) with Optuna: the values of every trial, the ask times."""
    kind, problem, seed, trials = job
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    import warnings
    warnings.simplefilter("ignore")
    if kind == "optuna-nsga2":
        sampler = optuna.samplers.NSGAIISampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    dists = distributions(problem)
    values, ask_ns = [], []
    for _ in range(trials):
        t0 = time.perf_counter_ns()
        trial = study.ask(dists)
        ask_ns.append(time.perf_counter_ns() - t0)
        v = evaluate(problem, trial.params)
        study.tell(trial, v)
        values.append(v)
    return {"seed": seed, "values": values, "ask_ns": ask_ns}


def sweepd_runs(example, kind, problem, seeds, trials):
    out = subprocess.run(
        [str(example), "--sampler", kind.split("-")[1], "--problem", problem,
         "--seeds", "%d..%d" % (seeds.start, seeds.stop), "--trials", str(trials)],
        capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def check_agreement(runs):
    """The Rust and Python definitions of each problem give the same values."""
    worst = 0.0
    for (kind, problem), rs in runs.items():
        if not kind.startswith("sweepd"):
            continue
        for r in rs:
            want = evaluate(problem, r["last_params"])
            got = r["values"][-1]
            worst = max(worst, max(abs(a - b) for a, b in zip(want, got)))
    if worst > 1e-9:
        raise SystemExit("the Rust and Python problem definitions disagree by %g" % worst)
    return worst


def hypervolume(values, reference):
    import numpy as np
    from optuna._hypervolume import compute_hypervolume
    ref = np.array(reference, dtype=float)
    pts = np.array([v for v in values if all(a <= b for a, b in zip(v, reference))], dtype=float)
    if len(pts) == 0:
        return 0.0
    return float(compute_hypervolume(pts, ref))


# ----------------------------------------------------------------------------------------------
# Statistics

Z95 = 1.959964  # two-sided 95 %
Z80 = 0.841621  # one-sided 80 % power


def p_at_least(mine, theirs):
    """P(a seed of ours scores at least one of theirs), ties counted half (0.5: no difference)."""
    return 1 - bl.prob_less(mine, theirs) + 0.5 * sum(
        a == b for a in mine for b in theirs) / (len(mine) * len(theirs))


def compare(mine, theirs):
    """Ours against theirs on one cell: the difference of the means in units of Optuna's
    standard deviation with its 95 % confidence interval (normal approximation, unequal
    variances), P(ours >= theirs) with the two-sided p-value of the Mann-Whitney test (normal
    approximation), and the smallest difference these seeds detect with 80 % power."""
    n1, n2 = len(mine), len(theirs)
    sd = statistics.stdev(theirs) if n2 > 1 and statistics.stdev(theirs) > 0 else 1.0
    diff = statistics.fmean(mine) - statistics.fmean(theirs)
    se = math.sqrt(statistics.variance(mine) / n1 + statistics.variance(theirs) / n2) \
        if n1 > 1 and n2 > 1 else float("nan")
    p = p_at_least(mine, theirs)
    se_p = math.sqrt((n1 + n2 + 1) / (12.0 * n1 * n2))
    z = (p - 0.5) / se_p
    return {
        "d": diff / sd, "lo": (diff - Z95 * se) / sd, "hi": (diff + Z95 * se) / sd,
        "p": p, "p_value": math.erfc(abs(z) / math.sqrt(2)),
        "mde": (Z95 + Z80) * math.sqrt(1.0 / n1 + 1.0 / n2),
    }


# ----------------------------------------------------------------------------------------------
# Report

def summarize(runs, checkpoints):
    """Per (problem, sampler): the hypervolume per seed at each checkpoint, the ask times."""
    out = {}
    for (kind, problem), rs in runs.items():
        hv = {str(c): [hypervolume(r["values"][:c], REFERENCE[problem]) for r in rs]
              for c in checkpoints}
        asks = [ns for r in rs for ns in r["ask_ns"]]
        late = [ns for r in rs for ns in r["ask_ns"][-50:]]
        out.setdefault(problem, {})[kind] = {
            "hv": hv,
            "ask_ms_mean": statistics.fmean(asks) / 1e6,
            "ask_ms_last50": statistics.fmean(late) / 1e6,
        }
    return out


def algo_name(algo):
    return "NSGA-II" if algo == "nsga2" else "TPE"


def render(raw, more=None):
    s = raw["summary"]
    cps = raw["checkpoints"]
    info = raw["info"]
    d = bl.internal(raw.get("internals") or bl.internals(), "defaults.sampler")
    lines = [
        "## Several objectives: hypervolume against Optuna's NSGA-II and multi-objective TPE",
        "",
    ] + bl.machine_lines(info, raw["load_end"]) + [
        "- Command: `make bench` (runs `.venv/bin/python bench/multi_bench.py`); this run: `%s`"
        % raw["command"],
        "- Runtime: %.0f s in all (sweepd %.1f s, Optuna %.0f s, %d at once); raw results: "
        "`target/bench/multi.json`%s" % (raw["wall_s"], raw["sweepd_wall_s"], raw["optuna_wall_s"],
                                         raw["jobs"], " and `multi_more.json`" if more else ""),
        "",
        "**What is measured.** %d seeds, %d sequential trials per run, every sampler with its "
        "defaults (NSGA-II: population %d, uniform crossover %g/%g, mutation 1/n by a random "
        "draw; TPE: %d random startup trials, %d candidates, independent sampling with several "
        "objectives, constant liar), on four problems whose two objectives are both minimized: "
        "ZDT1 and ZDT2 with 10 variables, DTLZ2 with 10, and `mixed` (a float, an int, a log int "
        "and a categorical whose choices trade one objective for the other), defined in "
        "`bench/multi_bench.rs` and `.py` and checked to agree (largest difference %.1g); fewer "
        "variables than the literature's so that Optuna's TPE finishes in minutes on 2 cores. "
        "Quality is Optuna's `compute_hypervolume` of every trial's values against the reference "
        "point %s (higher is better); `P(ours ≥ Optuna)` is the probability that a seed of "
        "sweepd's sampler scores at least one of Optuna's (0.5: no difference). Ask: the time of "
        "one proposal in ms, mean over every trial and over the last 50 of each run (sweepd: "
        "`Sampler::sample`, in-process Rust; Optuna: `study.ask` on in-memory storage)." % (
            raw["seeds"], raw["trials"], d["population_size"], d["crossover_prob"],
            d["swapping_prob"], d["n_startup_trials"], d["n_ei_candidates"], raw["agreement"],
            ", ".join("%s %s" % (p, REFERENCE[p]) for p in PROBLEMS)),
        "",
    ]
    header = "| problem | sampler |" + "".join(" HV@%d mean (sd) |" % c for c in cps) + \
        "".join(" P(ours ≥ Optuna) @%d |" % c for c in cps) + " ask ms (mean / last 50) |"
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for problem in PROBLEMS:
        for algo in ("nsga2", "tpe"):
            for who in ("sweepd", "optuna"):
                r = s[problem]["%s-%s" % (who, algo)]
                theirs = s[problem]["optuna-%s" % algo]
                row = "| %s | %s %s |" % (problem, who, algo_name(algo))
                for c in cps:
                    hv = r["hv"][str(c)]
                    row += " %s (%s) |" % (bl.fmt(statistics.fmean(hv)),
                                           bl.fmt(statistics.pstdev(hv)))
                for c in cps:
                    if who == "sweepd":
                        row += " %.2f |" % compare(r["hv"][str(c)], theirs["hv"][str(c)])["p"]
                    else:
                        row += " |"
                row += " %s / %s |" % (bl.fmt(r["ask_ms_mean"]), bl.fmt(r["ask_ms_last50"]))
                lines.append(row)
    if more:
        lines += render_more(more, cps)
    lines += render_reading(raw, more, cps)
    return "\n".join(lines)


def pooled(raw, more):
    """Per (problem, algo): every seed run, the main table's and the extra runs' (all seeds
    distinct), as {checkpoint: (sweepd's hypervolumes, Optuna's)}."""
    out = {}
    for problem in PROBLEMS:
        for algo in ("nsga2", "tpe"):
            s = raw["summary"][problem]
            out[(problem, algo)] = {
                c: (list(s["sweepd-" + algo]["hv"][str(c)]), list(s["optuna-" + algo]["hv"][str(c)]))
                for c in raw["checkpoints"]}
    for key, cell in (more or {"cells": {}})["cells"].items():
        problem, algo, _ = key.split("/")
        for c in raw["checkpoints"]:
            mine, theirs = out[(problem, algo)][c]
            mine += cell["hv"]["sweepd"][str(c)]
            theirs += cell["hv"]["optuna"][str(c)]
    return out


def render_reading(raw, more, cps):
    """What the figures say about the goal, from every seed run (the table's and, with `more`,
    the extra runs', all seeds distinct, in a table of their own)."""
    pool = pooled(raw, more)
    lines = []
    if more:
        lines += [
            "",
            "### Every seed run, pooled",
            "",
            "The table's seeds and the extra runs' together (extra seeds were run where a cell looked "
            "low, so a pool holding that run leans that way; the runs made after it are the "
            "unbiased check):",
            "",
        ]
        header = "| problem | sampler | seeds a side |" + "".join(
            " d @%d [95%% CI] | P(ours ≥ Optuna) @%d (p) |" % (c, c) for c in cps)
        lines += [header, "|" + "---|" * (header.count("|") - 1)]
    results = []
    for problem in PROBLEMS:
        for algo in ("nsga2", "tpe"):
            cell = pool[(problem, algo)]
            row = "| %s | %s | %d |" % (problem, algo_name(algo), len(cell[cps[0]][0]))
            for c in cps:
                cmp = compare(*cell[c])
                row += " %+.2f [%+.2f, %+.2f] | %.2f (%.2f) |" % (
                    cmp["d"], cmp["lo"], cmp["hi"], cmp["p"], cmp["p_value"])
                results.append((problem, algo, c, len(cell[c][0]), cmp))
            if more:
                lines.append(row)
    holm(results)
    below = [r for r in results if r[4]["d"] < 0 and r[4]["p_holm"] < 0.05]
    above = [r for r in results if r[4]["d"] > 0 and r[4]["p_holm"] < 0.05]
    loose = [r for r in results if r[4]["p_value"] < 0.05 or r[4]["lo"] > 0 or r[4]["hi"] < 0]
    worst = min(results, key=lambda r: r[4]["lo"])

    def name(r):
        return "%s %s @%d (%d seeds: d = %+.2f [%+.2f, %+.2f], Mann-Whitney p = %.2f, %.2f " \
            "after Holm)" % (r[0], algo_name(r[1]), r[2], r[3], r[4]["d"], r[4]["lo"],
                             r[4]["hi"], r[4]["p_value"], r[4]["p_holm"])

    behind = sum(r[4]["d"] < 0 for r in results)
    text = ("sweepd's mean hypervolume is below Optuna's in %d of %d cells%s, and `d`, sweepd's "
            "mean minus Optuna's in units of Optuna's standard deviation, lies between %+.2f and "
            "%+.2f. " % (behind, len(results), " (every seed run pooled)" if more else "",
                            min(r[4]["d"] for r in results), max(r[4]["d"] for r in results)))
    if below:
        text += ("**Goal (hypervolume at least Optuna's on each problem): not met** where sweepd is "
                 "below Optuna's at the 5%% level after Holm's correction for the %d comparisons: "
                 "%s. " % (len(results), "; ".join(name(r) for r in below)))
    else:
        text += ("**Goal (hypervolume at least Optuna's on each problem): met to the resolution of "
                 "this benchmark**: no cell is below Optuna's at the 5%% level (Mann-Whitney, "
                 "Holm's correction for the %d comparisons), and what these seeds rule out at 95%% "
                 "confidence is a shortfall larger than %.2f sd in any cell (the weakest bound: "
                 "%s). " % (len(results), -worst[4]["lo"], name(worst)))
    if above:
        text += "Above Optuna's after Holm's correction: %s. " % "; ".join(name(r) for r in above)
    fewest = min(r[3] for r in results)
    text += ("With %d seeds a side, a difference below %.2f sd goes undetected more than one time "
             "in five (80%% power, two-sided 5%%). " % (fewest, (Z95 + Z80) * math.sqrt(2.0 / fewest)))
    text += "Without the correction, %s. " % (
        "no cell differs at the 5% level" if not loose else
        "%s differ%s at the 5%% level (about %.1f of %d are expected by chance alone)" % (
            "; ".join(name(r) for r in loose), "s" if len(loose) == 1 else "",
            0.05 * len(results), len(results)))
    text += ("The samplers are checked against Optuna's own code in unit tests "
             "(`src/sampler/nsga2/tests.rs`, `src/sampler/tpe/multi.rs`) and differ by design only "
             "in their random numbers, so a seed of each is a draw of the same kind of run and the "
             "gaps are expected to be noise.")
    return lines + ["", "**Reading.** " + text]


def holm(results):
    """Holm's step-down adjustment of the comparisons' Mann-Whitney p-values, in place."""
    ranked = sorted(results, key=lambda r: r[4]["p_value"])
    m, running = len(ranked), 0.0
    for i, r in enumerate(ranked):
        running = max(running, min(1.0, (m - i) * r[4]["p_value"]))
        r[4]["p_holm"] = running


def render_more(more, cps):
    """The extra runs of `--more`: one row per cell, each on its own fresh seeds."""
    lines = [
        "",
        "### More seeds for the cells in question",
        "",
        "Fresh seeds (none of the table's above), the same problems, trials and samplers; each "
        "row is one `--more` run:",
        "",
    ]
    runs = {}
    for key, cell in sorted(more["cells"].items(), key=lambda kv: kv[1]["info"]["date_utc"]):
        runs.setdefault(cell["command"], cell)
    for command, cell in runs.items():
        info = cell["info"]
        lines.append("- `%s`: %s, sweepd %s, nproc %s, load average %.2f at start, %.2f at end; "
                     "%.0f s" % (command, info["date_utc"], info["commit"], info["nproc"],
                                 info["loadavg"][0], cell["load_end"][0], cell["wall_s"]))
    lines.append("")
    header = "| problem | sampler | seeds a side |" + "".join(
        " HV@%d sweepd / Optuna mean |" % c for c in cps) + "".join(
        " d @%d [95%% CI] | P(ours ≥ Optuna) @%d (p) |" % (c, c) for c in cps)
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    def order(key):
        problem, algo, first = key.split("/")
        return PROBLEMS.index(problem), algo, int(first)

    for key in sorted(more["cells"], key=order):
        cell = more["cells"][key]
        problem, algo, _ = key.split("/")
        row = "| %s | %s | %d (%d..%d) |" % (problem, algo_name(algo), len(cell["seeds"]),
                                             cell["seeds"][0], cell["seeds"][-1])
        cmps = []
        for c in cps:
            mine, theirs = cell["hv"]["sweepd"][str(c)], cell["hv"]["optuna"][str(c)]
            row += " %s / %s |" % (bl.fmt(statistics.fmean(mine)), bl.fmt(statistics.fmean(theirs)))
            cmps.append(compare(mine, theirs))
        for cmp in cmps:
            row += " %+.2f [%+.2f, %+.2f] | %.2f (%.2f) |" % (
                cmp["d"], cmp["lo"], cmp["hi"], cmp["p"], cmp["p_value"])
        lines.append(row)
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--algos", default="nsga2,tpe", help="of nsga2,tpe (--more only)")
    ap.add_argument("--problems", default=",".join(PROBLEMS), help="--more only")
    ap.add_argument("--more", action="store_true",
                    help="extra seeds for some cells: kept in target/bench/multi_more.json and "
                         "shown in a table of their own; the main run's results are kept")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--target-dir", default=os.environ.get("CARGO_TARGET_DIR"))
    ap.add_argument("--render", action="store_true", help="rewrite the doc from the raw results")
    args = ap.parse_args()
    raw_path = bl.RAW_DIR / "multi.json"
    more_path = bl.RAW_DIR / "multi_more.json"

    def load_more():
        return json.loads(more_path.read_text()) if more_path.exists() else None

    if args.render:
        bl.publish("multi", render(json.loads(raw_path.read_text()), load_more()), args.no_doc)
        return
    algos = args.algos.split(",") if args.more else ["nsga2", "tpe"]
    problems = args.problems.split(",") if args.more else PROBLEMS
    if args.more and not raw_path.exists():
        raise SystemExit("--more adds to a main run: run without --more first")
    if args.more and args.first_seed < json.loads(raw_path.read_text())["seeds"]:
        raise SystemExit("--more needs fresh seeds: --first-seed at least the main run's --seeds")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    info = bl.machine_info()
    info["commit"] = bl.source_state()
    bl.cargo_build(args, ["--example", "multi_bench", "--bin", "sweepd"])
    example = bl.target_dir(args) / "release" / "examples" / "multi_bench"
    start = time.time()
    runs = {}
    t = time.time()
    for problem in problems:
        for algo in algos:
            kind = "sweepd-" + algo
            runs[(kind, problem)] = sweepd_runs(example, kind, problem, seeds, args.trials)
    sweepd_wall = time.time() - t
    agreement = check_agreement(runs)
    bl.log("sweepd: %.1f s; Optuna next (%d runs on %d processes)"
           % (sweepd_wall, len(algos) * len(problems) * len(seeds), args.jobs))
    t = time.time()
    jobs = [("optuna-" + algo, problem, seed, args.trials) for algo in algos
            for problem in problems for seed in seeds]
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        for job, r in zip(jobs, pool.map(optuna_run, jobs)):
            runs.setdefault((job[0], job[1]), []).append(r)
    optuna_wall = time.time() - t
    checkpoints = sorted({min(100, args.trials), args.trials})
    summary = summarize(runs, checkpoints)
    if args.more:
        main_raw = json.loads(raw_path.read_text())
        if main_raw["checkpoints"] != checkpoints:
            raise SystemExit("--more needs the main run's --trials")
        more = load_more() or {"cells": {}}
        command = "bench/multi_bench.py --more --algos %s --problems %s --first-seed %d " \
            "--seeds %d" % (",".join(algos), ",".join(problems), args.first_seed, args.seeds) \
            + ("" if args.trials == 300 else " --trials %d" % args.trials)
        for problem in problems:
            for algo in algos:
                # One row per cell and first seed: a run on other fresh seeds adds a row.
                more["cells"]["%s/%s/%d" % (problem, algo, args.first_seed)] = {
                    "command": command, "seeds": list(seeds), "info": info,
                    "load_end": os.getloadavg(), "wall_s": time.time() - start,
                    "hv": {who: summary[problem]["%s-%s" % (who, algo)]["hv"]
                           for who in ("sweepd", "optuna")},
                }
        bl.save_raw("multi_more.json", more)
        text = render(main_raw, more)
    else:
        raw = {
            "command": "bench/multi_bench.py" + (
                "" if (args.seeds, args.trials, args.first_seed) == (20, 300, 0) else
                " --first-seed %d --seeds %d --trials %d"
                % (args.first_seed, args.seeds, args.trials)),
            "seeds": args.seeds, "trials": args.trials, "checkpoints": checkpoints,
            "info": info, "agreement": agreement, "jobs": args.jobs,
            "summary": summary,
            "sweepd_wall_s": sweepd_wall, "optuna_wall_s": optuna_wall,
            "wall_s": time.time() - start, "load_end": os.getloadavg(),
            "internals": bl.internals(bl.target_dir(args) / "release" / "sweepd"),
        }
        bl.save_raw("multi.json", raw)
        # Extra runs of an earlier main run stay, each row naming its own commit and date.
        text = render(raw, load_more())
    bl.publish("multi", text, args.no_doc)


if __name__ == "__main__":
    main()
