"""What-ifs on a kept packing run: other ways to start a study, and other orders of a line.

Usage: .venv/bin/python bench/packing_whatif.py DIR
DIR: a run of bench/gpu_bench.py kept with GPU_BENCH_KEEP=1 (`kept /tmp/sweepd-pack-...`).

Everything here is list scheduling (`benchlib.oracle`) of the run's own trials (their recorded
peaks and lengths, studies interleaved in trial-number order, at most the run's `max_par` at once
per study), as a fraction of the oracle's throughput (the true peaks on the run's card). Learners
and held estimates get the card less sweepd's default headroom; sweepd's rule for a study's first
trials and the defaults come from the binary (`sweepd internals --json`). A foreign process is
left out (the card keeps its size): read the figures of the foreign workload with that in mind.
docs/decisions.md quotes these figures.
"""

import datetime
import glob
import math
import os
import sqlite3
import sys
import tomllib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib as bl  # noqa: E402

# The fake NVML's state file, parsed as the simulated worker parses it.
sys.path.insert(0, os.path.join(str(bl.ROOT), "tests", "workers"))
from gpu_sim_worker import read_state  # noqa: E402

GIB = bl.GIB


def kept_run(root):
    """(rows, sweepd's makespan): a row per trial, studies in directory order."""
    dirs = sorted(glob.glob(os.path.join(root, "study*")))
    if not dirs:
        sys.exit("packing_whatif: no study directory in %s (keep a run with GPU_BENCH_KEEP=1)"
                 % root)
    est = bl.estimates_in(dirs)
    rows, starts, ends = [], [], []
    for i, d in enumerate(dirs):
        conn = sqlite3.connect("file:%s?mode=ro" % os.path.join(d, "study.db"), uri=True)
        try:
            for s, c in conn.execute("SELECT datetime_start, datetime_complete FROM trials "
                                     "WHERE datetime_complete IS NOT NULL"):
                starts.append(datetime.datetime.fromisoformat(s).timestamp())
                ends.append(datetime.datetime.fromisoformat(c).timestamp())
            # A re-run (at its cap, after an OOM) is a copy under a new number: one trial.
            copies = {n: int(v) for n, v in conn.execute(
                "SELECT t.number, a.value_json FROM trials t JOIN trial_system_attributes a "
                "ON a.trial_id = t.trial_id WHERE a.key = 'failed_trial'")}
        finally:
            conn.close()
        records = bl.records_in(os.path.join(d, "record"))
        for n, (peak, dur) in bl.merge_attempts([(records, copies)]).items():
            rows.append(dict(study=i, n=n, peak=peak, dur=dur, est=est.get((i, n), peak)))
    rows.sort(key=lambda r: (r["n"], r["study"]))
    return rows, (max(ends) - min(starts)) if starts else float("nan")


def run_config(root):
    """The first study's supervisor.toml and the card's size (the fake NVML's state file)."""
    with open(sorted(glob.glob(os.path.join(root, "study*", "supervisor.toml")))[0], "rb") as f:
        config = tomllib.load(f)
    totals, _ = read_state(os.path.join(root, "nvml.state"))
    return config, totals[0]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[2])
    root = sys.argv[1]
    rows, sweepd_span = kept_run(root)
    config, full = run_config(root)
    internals = bl.internals()
    k0 = bl.internal(internals, "consts.MIN_MEASURED")
    margin = bl.internal(internals, "consts.PRIOR_MARGIN")
    prior = int(bl.internal(internals, "defaults.gpu.trial_memory") * margin)
    card = full - bl.internal(internals, "defaults.gpu.headroom")
    studies = [r["study"] for r in rows]
    cap = config["worker"]["max_par"] * len(set(studies))
    peaks = [(r["peak"], r["dur"]) for r in rows]
    span = bl.oracle(peaks, cap, full)[0]
    print("oracle %.2f s; sweepd %.2f s: %.3f of the oracle" % (span, sweepd_span,
                                                                span / sweepd_span))
    ramp = float(config.get("worker", {}).get("env", {}).get("SIM_RAMP_S", 0.2))
    print("learners (the true peaks, %s):" % bl.gib(card))
    for what, k, k1, p, settle in [
            ("sweepd's rule: first %d at the prior, known once they end" % k0, k0, k0, prior,
             math.inf),
            ("known once 1 of the first %d has ended" % k0, k0, 1, prior, math.inf),
            ("only the first trial at the prior, known once it ends", 1, 1, prior, math.inf),
            ("trial_memory 4 GiB (x %g)" % margin, k0, k0, int(4 * GIB * margin), math.inf),
            ("first trials settle %.1f s after they start (twice the ramp and a reading)"
             % (2 * ramp + 0.1), k0, k0, prior, 2 * ramp + 0.1),
            ("no learning: every peak known from the start", 0, 0, 0, math.inf)]:
        got = bl.oracle(peaks, cap, card, learn=(studies, k, p, k1, settle))[0]
        print("  %.3f  %s" % (span / got, what))
    for f in (1.05, 1.10):
        told = [(r["peak"] * f, r["dur"]) for r in rows]
        print("  %.3f  no learning, every peak x %.2f" % (
            span / bl.oracle(told, cap, card)[0], f))
        print("  %.3f  sweepd's rule, every later peak x %.2f" % (
            span / bl.oracle(told, cap, card, learn=(studies, k0, prior))[0], f))
    print("sweepd's estimates held whole (%s), in these orders:" % bl.gib(card))
    per = max(r["n"] for r in rows) + 1

    def held(order):
        return span / bl.oracle([(r["est"], r["dur"]) for r in order], cap, card)[0]

    print("  %.3f  trial-number order" % held(rows))
    print("  %.3f  largest first (every trial of the run known in advance)"
          % held(sorted(rows, key=lambda r: -r["est"])))
    for window in (8, 16):
        order = []
        for lo in range(0, per, window):
            order += sorted((r for r in rows if lo <= r["n"] < lo + window),
                            key=lambda r: -r["est"])
        print("  %.3f  largest first within windows of %d trials of each study" % (held(order),
                                                                                     window))
    for share in (0.25, 0.5):
        cut = int(per * (1 - share))
        order = [r for r in rows if r["n"] < cut]
        order += sorted((r for r in rows if r["n"] >= cut), key=lambda r: -r["est"])
        print("  %.3f  largest first over the last %d%% of each study only"
              % (held(order), share * 100))


if __name__ == "__main__":
    main()
