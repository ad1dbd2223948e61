#!/usr/bin/env python3
"""Two sweepd binaries side by side on the overhead workload of search_bench.py.

usage: .venv/bin/python bench/ab_overhead.py BINARY_A BINARY_B [--sizes 1000,10000] [--reps 3]

Runs the whole-daemon overhead study (``benchlib.run_daemon``: persistent Python workers,
instant objective, TPE, max_par 2; see ``search_bench.py overhead``) with A and B in turn,
A B A B ..., and prints each run and the ratio B/A of ms per trial pair by pair, so that a
comparison holds when the shared machine's speed drifts. Used for before/after figures in
docs/decisions.md (build the "before" binary from the old commit into another path first).
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib as bl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--par", type=int, default=2)
    ap.add_argument("--deadline", type=float, default=600)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sweepd-ab-"))
    print("machine:", bl.machine_info())
    for n in [int(s) for s in args.sizes.split(",")]:
        ratios, per = [], {"A": [], "B": []}
        for rep in range(args.reps):
            pair = {}
            for name, binary in (("A", args.a), ("B", args.b)):
                r = bl.run_daemon(Path(binary).resolve(), work / name, n, args.par, args.deadline)
                ms = 1e3 * r["wall_s"] / max(r["complete"], 1)
                cpu = 1e3 * r["daemon_cpu_s"] / max(r["complete"], 1)
                pair[name] = ms
                per[name].append((ms, cpu))
                print("n=%d rep %d %s: %d complete, %.3f ms/trial wall, %.3f ms/trial daemon CPU"
                      % (n, rep, name, r["complete"], ms, cpu), flush=True)
            ratios.append(pair["B"] / pair["A"])
        med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
               for k, v in per.items()}
        print("n=%d median ms/trial wall / daemon CPU: A %.3f / %.3f, B %.3f / %.3f; "
              "B/A wall per pair %s, median %.2f"
              % (n, med["A"][0], med["A"][1], med["B"][0], med["B"][1],
                 ", ".join("%.2f" % r for r in ratios), statistics.median(ratios)), flush=True)


if __name__ == "__main__":
    main()
