#!/usr/bin/env python3
"""Small budgets: sweepd's GP sampler against Optuna's GPSampler and against TPE.

Optuna's ``GPSampler`` needs ``torch`` and ``scipy``, which the test venv does not have: run this
with the GP bench's venv, which ``make bench-gp`` (or ``make bench GP=1``) makes and uses::

    .venv-gp/bin/python bench/gp_bench.py                       # what `make bench-gp` runs
    .venv-gp/bin/python bench/gp_bench.py --seeds 3 --no-doc    # smoke test
    .venv-gp/bin/python bench/gp_bench.py --render              # the doc from the raw results

The six functions of ``bench/search_bench.py`` (2-D to 10-D, one mixed float/int/categorical),
each minimized from ``--seeds`` seeds for ``--trials`` trials with ``--batch`` trials in flight
at once (ask that many, each asked while the ones before it run, then tell their values) by

- sweepd's GP (``sampler = "gp"``, its defaults) and TPE (its defaults), driven as the daemon
  drives them (``bench/sampler_bench.rs --batch``, no daemon);
- Optuna 5.0's ``GPSampler(seed=s)`` and ``TPESampler(seed=s, multivariate=True,
  constant_liar=True)`` (``study.ask(fixed_distributions=space)`` that many times, then
  ``study.tell``; in-memory storage).

The best value after 30, 60 and 100 trials is compared; the milliseconds per ask are timed on
every ask, and the GP's cost as trials pile up is timed apart (``sampler_bench --timing-gp``
for sweepd, the same protocol in Python for Optuna). Writes the section ``<!-- bench:gp -->``
of ``docs/benchmarks.md`` and its raw results to ``target/bench/gp_bench.json``.
"""

import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import time

# Optuna's GP runs torch and NumPy in one process: one thread each, as its docs advise.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import benchlib as bl  # noqa: E402
import search_bench as sb  # noqa: E402

SAMPLERS = ["sweepd-gp", "optuna-gp", "optuna-gp-ref", "sweepd-tpe", "optuna-tpe"]
# `optuna-gp-ref` is Optuna's GP again on seeds N..2N-1: what a run of the same sampler scores
# against `optuna-gp`, so that a P of sweepd's GP is read against chance.
REF = "optuna-gp-ref"
CHECKPOINTS = (30, 60, 100)


def _init():
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:
        pass


def optuna_run(job):
    """One Optuna run with `batch` trials in flight."""
    import optuna

    name, sampler_name, seed, trials, batch = job
    f, space, _, _ = sb.functions()[name]
    if sampler_name in ("optuna-gp", REF):
        sampler = optuna.samplers.GPSampler(seed=seed)
    else:
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    best, curve, ask_ms = math.inf, [], []
    while len(curve) < trials:
        asked = []
        for _ in range(min(batch, trials - len(curve))):
            t0 = time.perf_counter()
            asked.append(study.ask(fixed_distributions=space))
            ask_ms.append(1e3 * (time.perf_counter() - t0))
        for trial in asked:
            value = f(trial.params)
            study.tell(trial, value)
            best = min(best, value)
            curve.append(best)
    return {"func": name, "sampler": sampler_name, "seed": seed, "trials": trials,
            "batch": batch, "curve": curve, "ask_ms": ask_ms}


def optuna_timing(job):
    """Optuna's GP: ms per ask with `n` COMPLETE trials at random points and 3 running."""
    import optuna

    name, n, seed = job
    f, space, _, _ = sb.functions()[name]
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.GPSampler(seed=seed))
    rnd = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(n):
        t = rnd.ask(fixed_distributions=space)
        study.add_trial(optuna.trial.create_trial(params=t.params, distributions=space,
                                                  value=f(t.params)))
    for _ in range(3):
        study.ask(fixed_distributions=space)  # running
    asks = 2 if n > 200 else 5
    t0 = time.perf_counter()
    for _ in range(asks):
        study.ask(fixed_distributions=space)
    return {"func": name, "trials": n, "running": 3,
            "ms_per_ask": 1e3 * (time.perf_counter() - t0) / asks, "asks": asks}


def run_sweepd(example, names, args):
    """sweepd's samplers, `args.jobs` example processes at once (functions split between them)."""
    procs = []
    for g in [names[i :: args.jobs] for i in range(args.jobs)]:
        if g:
            cmd = [str(example), "--funcs", ",".join(g), "--samplers", "gp,tpe", "--seeds",
                   str(args.seeds), "--trials", str(args.trials), "--batch", str(args.batch)]
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit("sampler_bench failed with status %d" % p.returncode)
        results += [json.loads(line) for line in out.splitlines()]
    return results


def run(args):
    info = dict(bl.machine_info(), commit=bl.source_state())
    t_start = time.perf_counter()
    bl.cargo_build(args, ["--example", "sampler_bench", "--bin", "sweepd"])
    example = bl.target_dir(args) / "release" / "examples" / "sampler_bench"
    max_err = sb.check_functions(example)
    names = list(sb.functions())
    bl.log("sweepd GP and TPE: %d functions x %d seeds x %d trials, %d at once"
           % (len(names), args.seeds, args.trials, args.batch))
    t0 = time.perf_counter()
    results = run_sweepd(example, names, args)
    sweepd_wall = time.perf_counter() - t0
    sizes = [int(s) for s in args.sizes.split(",")]
    timing = subprocess.run([str(example), "--timing-gp", "--sizes", args.sizes], check=True,
                            capture_output=True, text=True).stdout
    sweepd_timing = [json.loads(line) for line in timing.splitlines()]
    jobs = [(n, s, seed, args.trials, args.batch) for n in names for s in ("optuna-gp", "optuna-tpe")
            for seed in range(args.seeds)]
    jobs += [(n, REF, seed, args.trials, args.batch) for n in names
             for seed in range(args.seeds, 2 * args.seeds)]
    # The slow ones first, so that the pool ends together.
    jobs.sort(key=lambda j: j[1] == "optuna-tpe")
    bl.log("Optuna: %d runs on %d processes" % (len(jobs), args.jobs))
    t0 = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(args.jobs, initializer=_init) as ex:
        for i, r in enumerate(ex.map(optuna_run, jobs, chunksize=1)):
            results.append(r)
            bl.log("  %d/%d Optuna runs (%s %s seed %d)" % (i + 1, len(jobs), r["sampler"], r["func"],
                                                          r["seed"]))
        opt_sizes = [n for n in sizes if n <= args.optuna_timing_max]
        tjobs = [(f, n, 0) for f in ("hartmann6", "nnlike_mixed") for n in opt_sizes]
        optuna_timings = list(ex.map(optuna_timing, tjobs, chunksize=1))
    optuna_wall = time.perf_counter() - t0
    raw = {"info": info, "args": vars(args), "results": results, "max_err": max_err,
           "sweepd_timing": sweepd_timing, "optuna_timing": optuna_timings,
           "sweepd_wall": sweepd_wall, "optuna_wall": optuna_wall,
           "total_wall": time.perf_counter() - t_start, "load_end": os.getloadavg(),
           "internals": bl.internals(bl.target_dir(args) / "release" / "sweepd")}
    bl.save_raw("gp_bench.json", raw)
    bl.publish("gp", render(raw), args.no_doc)


def ask_ms_near(runs, lo, hi):
    """Mean ms of the asks made with `lo` to `hi - 1` trials already asked, over `runs`."""
    xs = [ms for r in runs for ms in r["ask_ms"][lo:hi]]
    return sum(xs) / len(xs) if xs else float("nan")


def render(raw):
    args, info = argparse.Namespace(**raw["args"]), raw["info"]
    funcs = sb.functions()
    names = list(funcs)
    cap = bl.internal(raw["internals"], "consts.GP_MAX_FIT_TRIALS")
    by = {}
    for r in raw["results"]:
        by.setdefault((r["func"], r["sampler"]), []).append(r)
    cps = [c for c in CHECKPOINTS if c <= args.trials]
    T = cps[-1]
    L = ["## Small budgets: sweepd GP vs Optuna GP vs TPE, %d trials in flight" % args.batch, ""]
    L += bl.machine_lines(info, raw["load_end"])
    L.append("- Command: `make bench-gp` (or `make bench GP=1`; it makes `.venv-gp` with Optuna, "
             "torch and SciPy); this section alone: `.venv-gp/bin/python bench/gp_bench.py "
             "--seeds %d --trials %d --batch %d --jobs %d --sizes %s`"
             % (args.seeds, args.trials, args.batch, args.jobs, args.sizes))
    L.append("- Runtime: %.0f s in all (sweepd %.0f s, Optuna %.0f s, %d processes); raw runs: "
             "`target/bench/gp_bench.json`" % (raw["total_wall"], raw["sweepd_wall"],
                                               raw["optuna_wall"], args.jobs))
    L.append("")
    L.append("**What is measured.** The functions of the sampler section above, each minimized "
             "from seeds 0..%d, %d trials per run, %d at a time: %d asks (each made while the "
             "ones before it run), then their %d values told. `sweepd-gp` and `sweepd-tpe` are "
             "`sampler = \"gp\"` and `\"tpe\"` with the `[sampler]` defaults (sweepd's GP models "
             "power-transformed values: `docs/decisions.md`, \"The GP learns from "
             "power-transformed values\"), driven by "
             "`bench/sampler_bench.rs --batch %d` through the calls the daemon makes; "
             "`optuna-gp` is Optuna %s's `GPSampler(seed=s)`, `optuna-tpe` its "
             "`TPESampler(seed=s, multivariate=True, constant_liar=True)`, through "
             "`study.ask(fixed_distributions=space)` / `study.tell` on in-memory storage. Lower "
             "is better. ms/ask @%d: the mean time of the asks made with %d to %d trials asked, "
             "%d processes at once on %s cores (sweepd: `sample` + `observe` in Rust; Optuna: "
             "`study.ask`, which includes its trial bookkeeping)."
             % (args.seeds - 1, args.trials, args.batch, args.batch, args.batch, args.batch,
                info["optuna"], T, T - 10, T - 1, args.jobs, info["nproc"]))
    L.append("")
    L.append("### Best value found: median [25%, 75%] over the seeds")
    L.append("")
    L.append("| function | sampler | " + " | ".join("best@%d" % c for c in cps) + " | ms/ask @%d |" % T)
    L.append("|---|---|" + "---|" * (len(cps) + 1))
    final = {}
    for n in names:
        for s in SAMPLERS:
            runs = by.get((n, s), [])
            if not runs:
                continue
            cells = []
            for c in cps:
                vals = [r["curve"][c - 1] for r in runs]
                final[(n, s, c)] = vals
                cells.append("%s [%s, %s]" % (bl.fmt(bl.percentile(vals, 50)),
                                              bl.fmt(bl.percentile(vals, 25)),
                                              bl.fmt(bl.percentile(vals, 75))))
            final[(n, s, "ms")] = ask_ms_near(runs, T - 10, T)
            label = {"sweepd-gp": "**sweepd-gp**",
                     REF: "optuna-gp, seeds %d..%d" % (args.seeds, 2 * args.seeds - 1)}.get(s, s)
            L.append("| `%s` | %s | %s | %s |" % (n, label, " | ".join(cells), bl.fmt(final[(n, s, "ms")])))
    L.append("")
    L.append("### Summary")
    L.append("")
    L.append("P(A < B): the probability that a run of A ends lower than a run of B (0.5 = no "
             "difference; the Mann-Whitney common-language effect size over the %d x %d pairs); "
             "in brackets its 95%% bootstrap interval (the runs of each side redrawn, 2000 times). "
             "`optuna-gp'` is Optuna's GP on seeds %d..%d: P(optuna-gp' < optuna-gp) is what a "
             "sampler that *is* Optuna's GP scores, chance alone."
             % (args.seeds, args.seeds, args.seeds, 2 * args.seeds - 1))
    L.append("")
    L.append("| function | " + " | ".join("P(sweepd-gp < optuna-gp) @%d" % c for c in cps)
             + " | P(optuna-gp' < optuna-gp) @%d | P(sweepd-gp < sweepd-tpe) @%d | "
             "P(optuna-gp < sweepd-tpe) @%d | ms/ask @%d: sweepd-gp / optuna-gp |" % (T, T, T, T))
    L.append("|---|" + "---|" * (len(cps) + 4))
    ok, tpe_rows, slower, ref = [], [], [], []
    for n in names:
        if (n, "optuna-gp", T) not in final or (n, "sweepd-gp", T) not in final:
            continue
        ps = [bl.prob_less(final[(n, "sweepd-gp", c)], final[(n, "optuna-gp", c)]) for c in cps]
        iv = bl.prob_less_interval(final[(n, "sweepd-gp", T)], final[(n, "optuna-gp", T)])
        p_st = bl.prob_less(final[(n, "sweepd-gp", T)], final[(n, "sweepd-tpe", T)])
        p_ot = bl.prob_less(final[(n, "optuna-gp", T)], final[(n, "sweepd-tpe", T)])
        ms_s, ms_o = final[(n, "sweepd-gp", "ms")], final[(n, "optuna-gp", "ms")]
        ok.append((n, ps[-1], iv))
        tpe_rows.append((n, p_st, p_ot))
        if not ms_s < ms_o:
            slower.append(n)
        cells = ["%.2f" % p for p in ps[:-1]] + ["%.2f [%.2f, %.2f]" % (ps[-1], *iv)]
        if (n, REF, T) in final:
            p_ref = bl.prob_less(final[(n, REF, T)], final[(n, "optuna-gp", T)])
            ref.append((n, p_ref))
            iv_ref = bl.prob_less_interval(final[(n, REF, T)], final[(n, "optuna-gp", T)])
            cells.append("%.2f [%.2f, %.2f]" % (p_ref, *iv_ref))
        else:
            cells.append("not run")
        L.append("| `%s` | %s | %.2f | %.2f | %s / %s |" % (n, " | ".join(cells), p_st, p_ot,
                                                          bl.fmt(ms_s), bl.fmt(ms_o)))
    L.append("")
    L.append("### Cost per ask as trials pile up")
    L.append("")
    L.append("ms per proposal with N COMPLETE trials (at random points) and 3 running, 5 "
             "proposals each (Optuna: 2 past 200 trials), one process: sweepd "
             "(`sampler_bench --timing-gp`) and Optuna's `GPSampler` (`study.ask`).")
    L.append("")
    sizes = sorted({t["trials"] for t in raw["sweepd_timing"]})
    L.append("| function | sampler | " + " | ".join("N = %d" % s for s in sizes) + " |")
    L.append("|---|---|" + "---|" * len(sizes))
    for f in ("hartmann6", "nnlike_mixed"):
        for label, rows in (("sweepd-gp", raw["sweepd_timing"]), ("optuna-gp", raw["optuna_timing"])):
            got = {t["trials"]: t["ms_per_ask"] for t in rows if t["func"] == f}
            L.append("| `%s` | %s | %s |" % (f, label, " | ".join(
                bl.fmt(got[s]) if s in got else "not run" for s in sizes)))
    L.append("")
    L.append("**Reading.** " + reading(ok, ref, tpe_rows, slower, raw, cap, T))
    return "\n".join(L) + "\n"


def reading(ok, ref, tpe_rows, slower, raw, cap, T):
    args = argparse.Namespace(**raw["args"])
    out = []
    met = [n for n, p, _ in ok if p >= 0.5]
    out.append("P(sweepd-gp < optuna-gp) at %d trials is at least 0.5 on %d of %d functions%s"
               % (T, len(met), len(ok), "" if len(met) == len(ok) else " (below on %s)" % ", ".join(
                   "`%s` %.2f" % (n, p) for n, p, _ in ok if p < 0.5)))
    sides = [("lies above 0.5", [n for n, _, (lo, _) in ok if lo > 0.5]),
             ("holds 0.5", [n for n, _, (lo, hi) in ok if lo <= 0.5 <= hi]),
             ("lies below 0.5", [n for n, _, (_, hi) in ok if hi < 0.5])]
    out.append("its 95%% interval %s" % ", ".join(
        "%s on %s" % (what, "all %d" % len(ok) if len(ns) == len(ok) else ", ".join(
            "`%s`" % n for n in ns)) for what, ns in sides if ns))
    if ref:
        below = [(n, p) for n, p in ref if p < 0.5]
        out.append("Optuna's GP against itself on other seeds scores %.2f to %.2f, below 0.5 on "
                   "%d of %d functions%s, so at %d seeds a P moves that far from 0.5 by chance "
                   "alone"
                   % (min(p for _, p in ref), max(p for _, p in ref), len(below), len(ref),
                      "" if not below else " (%s)" % ", ".join("`%s` %.2f" % b for b in below),
                      args.seeds))
    gp_ahead = [(n, ps, po) for n, ps, po in tpe_rows if po >= 0.6]
    if gp_ahead:
        out.append("where Optuna's GP is ahead of TPE (P(optuna-gp < sweepd-tpe) >= 0.6: %s), "
                   "sweepd's GP is ahead of it by %s"
                   % (", ".join("`%s`" % n for n, _, _ in gp_ahead),
                      ", ".join("%.2f on `%s`" % (ps, n) for n, ps, _ in gp_ahead)))
    out.append("a proposal costs sweepd's GP less than Optuna's at %d trials on %s"
               % (T, "every function" if not slower else "all but %s" % ", ".join(slower)))
    st = {t["trials"]: t["ms_per_ask"] for t in raw["sweepd_timing"] if t["func"] == "nnlike_mixed"}
    if st:
        out.append("past %d trials sweepd's fit takes a bounded set of them (the best quarter, the "
                   "newest half, the rest spread over the space: `src/sampler/gp/mod.rs`), so its "
                   "cost stops growing (%s ms at %s trials on `nnlike_mixed`), where Optuna fits "
                   "every trial, cubic in their number"
                   % (cap, "/".join(bl.fmt(st[k]) for k in sorted(st)),
                      "/".join(str(k) for k in sorted(st))))
    if args.seeds < 10:
        out.append("with %d seeds per function the probabilities move by about 0.1 from run to "
                   "run: the full bench (20 seeds) is `make bench-gp`" % args.seeds)
    text = "; ".join(out) + "."
    return text[:1].upper() + text[1:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--sizes", default="100,300,1000", help="history sizes of the cost timing")
    ap.add_argument("--optuna-timing-max", type=int, default=300,
                    help="Optuna's cost is timed up to this history size (it grows cubically)")
    ap.add_argument("--no-build", action="store_true", help="use the binaries already built")
    ap.add_argument("--target-dir", default=None, help="cargo target directory (default: ./target)")
    ap.add_argument("--no-doc", action="store_true", help="print the section instead of writing it")
    ap.add_argument("--render", action="store_true", help="rewrite the section from the raw results")
    args = ap.parse_args()
    if args.render:
        bl.publish("gp", render(bl.load_raw("gp_bench.json")), args.no_doc)
        return
    run(args)


if __name__ == "__main__":
    main()
