#!/usr/bin/env python3
"""What the GPU memory model costs per admission as trials pile up (``bench/model_bench.rs``,
the model driven directly, no daemon), written to the ``model`` section of docs/benchmarks.md.

    .venv/bin/python bench/model_bench.py              # what `make bench` runs
    .venv/bin/python bench/model_bench.py --no-doc     # print only
    .venv/bin/python bench/model_bench.py --render     # rewrite the doc from target/bench/model.json
    .venv/bin/python bench/model_bench.py --against OTHER_BINARY --no-doc
        # side by side with another build of the example, runs alternating (A B A B)

The supervisor estimates every candidate it considers for admission, and each trial that ends or
settles makes the next estimate fit again; so the cost of an estimate right after a record is
what an admission round pays as a study grows. Users run hundreds to thousands of trials, over
up to a few dozen params, most of which do nothing to memory.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402

CONFIGS = [(3, 2000), (10, 2000), (30, 500), (30, 2000)]


def run(binary, params, trials):
    out = subprocess.run([str(binary), "--params", str(params), "--trials", str(trials)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)["estimate_ns"]


def figures(ns):
    ms = [x / 1e6 for x in ns]
    last = sorted(ms[len(ms) - max(1, len(ms) // 10):])
    ordered = sorted(ms)
    return {
        "last_median": statistics.median(last),
        "mean": statistics.fmean(ms),
        "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "worst": ordered[-1],
        "total_s": sum(ms) / 1e3,
    }


def table(rows, against):
    head = ("| params | trials | ms per estimate, last tenth of the trials (median) | mean ms "
            "| p99 ms | worst ms (params chosen again) | all estimates, s |")
    lines = [head, "|---|---|---|---|---|---|---|"]
    for (p, t), f in rows:
        lines.append("| %d | %d | %.2f | %.2f | %.1f | %.0f | %.1f |"
                     % (p, t, f["last_median"], f["mean"], f["p99"], f["worst"], f["total_s"]))
    if against:
        lines += ["", "Against the other build (its figure / this build's, same runs alternating):",
                  "", "| params | trials | last tenth (median) | mean | worst |", "|---|---|---|---|---|"]
        for (p, t), f, g in against:
            lines.append("| %d | %d | %.2f | %.2f | %.2f |"
                         % (p, t, g["last_median"] / f["last_median"], g["mean"] / f["mean"],
                            g["worst"] / f["worst"]))
    return "\n".join(lines)


def render(raw):
    """The model section from the raw results of `main`."""
    rows = [((p, t), f) for p, t, f in raw["rows"]]
    against = [((p, t), f, g) for p, t, f, g in raw["against"]]
    return "\n".join([
        "## The GPU memory model: what an estimate costs as trials pile up",
        "",
    ] + bl.machine_lines(raw["info"], raw["load_end"]) + [
        "- Command: `make bench` (runs `.venv/bin/python bench/model_bench.py`); raw results: "
        "`target/bench/model.json`",
        "",
        "**What is measured.** `bench/model_bench.rs` drives `gpu::MemoryModel` directly, as the "
        "supervisor does: each trial is estimated (its admission), then its peak recorded (it "
        "ended), so each estimate fits again on every trial measured so far, and every tenth more "
        "trials the params that drive memory are chosen again (the worst figure). Params: `width` "
        "and `depth` drive memory (the packing bench's continuous workload), the rest are floats of "
        "no effect. One run per row; wall-clock times of one core.",
        "",
        table(rows, against),
        "",
        "**Reading.** An admission round estimates each candidate in its line once the model has "
        "fitted again, so a round costs about one figure of the third column plus a few estimates "
        "of the fitted model (tens of microseconds each).",
    ])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-doc", action="store_true", help="print, do not write docs/benchmarks.md")
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--target-dir")
    ap.add_argument("--against", help="another build of the model_bench example, run alternately")
    ap.add_argument("--render", action="store_true", help="rewrite the section from the raw results")
    args = ap.parse_args()
    if args.render:
        bl.publish("model", render(bl.load_raw("model.json")), args.no_doc)
        return
    info = bl.machine_info()
    info["commit"] = bl.source_state()
    bl.cargo_build(args, ["--example", "model_bench"])
    example = bl.target_dir(args) / "release" / "examples" / "model_bench"
    rows, against = [], []
    for p, t in CONFIGS:
        bl.log("model_bench: %d params, %d trials" % (p, t))
        if args.against:
            # A B A B: the machine's load drifts; each build's figure is the faster of its two.
            a1, b1, a2, b2 = (run(x, p, t) for x in (example, args.against, example, args.against))
            fa = min((figures(a1), figures(a2)), key=lambda f: f["total_s"])
            fb = min((figures(b1), figures(b2)), key=lambda f: f["total_s"])
            rows.append((p, t, fa))
            against.append((p, t, fa, fb))
        else:
            rows.append((p, t, figures(run(example, p, t))))
    raw = {"info": info, "rows": rows, "against": against, "load_end": os.getloadavg()}
    bl.save_raw("model.json", raw)
    bl.publish("model", render(raw), args.no_doc)


if __name__ == "__main__":
    main()
