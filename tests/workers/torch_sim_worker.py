#!/usr/bin/env python3
"""A simulated training worker on the stand-in PyTorch (tests/standin/torch), for sweepd's tests
of memory caps: its memory is the stand-in's caching allocator's, so sweepd's helper caps it
with ``torch.cuda.set_per_process_memory_fraction`` and reads its figures as it does PyTorch's,
a cap hit raises ``torch.OutOfMemoryError`` with PyTorch's text, and the fake NVML sees the
process's context and segments (``FAKE_NVML_STATE``, ``FAKE_TORCH_CONTEXT``,
``CUDA_VISIBLE_DEVICES``, read by the stand-in). It puts tests/standin on ``sys.path`` itself.

A trial allocates up to its peak in ``steps`` equal tensors over ``ramp`` seconds, reporting
after each, holds the peak ``hold`` seconds, and returns the sum of squares of its numeric
params (plus ``len(str(p))`` for the others). Params, each with an environment default:

mem     SIM_MEM      the trial's peak: a number (MiB) or a size ("1.5G"); default 1G
steps   SIM_STEPS    tensors to reach it (default 5)
ramp    SIM_RAMP_S   seconds to reach it (default 0.2)
hold    SIM_HOLD_S   seconds held at the peak (default 0.2)

SIM_MEM_PRODUCT=A,B,...  the peak is SIM_MEM_BASE + SIM_MEM_UNIT x params[A] x params[B] ...
                         (SIM_MEM_UNIT default 1M, SIM_MEM_BASE default 0); an entry A^P
                         takes params[A] to the power P (a float)
SIM_MEM_NOISE=F          the peak varies by up to +-F (a fraction) from trial to trial, the same
                         for the same params
SIM_HOLD_RANGE=A,B       seconds held at the peak drawn in [A, B], the same for the same params
SIM_SILENT_FRAMEWORK=1   torch leaves ``sys.modules`` once imported: the helper neither caps it
                         nor reads its figures, as with a framework it does not know (only NVML
                         sees this worker's memory)
SIM_RECORD=PATH          appends "pid number peak_bytes seconds outcome planned_bytes
                         planned_seconds" per trial (the format of gpu_sim_worker.py's, which
                         bench/benchlib.py's ``records_in`` reads): the most the process held
                         (NVML's view), how long the objective ran, complete or fail, and the
                         peak and length the trial was drawn to have, which one that failed
                         (at its cap, or on a full card) never reached

The draws (noise, hold) are keyed by the trial's params, not its number: sweepd re-runs a trial
that hit its cap as a copy under a new number, and the copy must be the same trial. The context
is the stand-in's (``FAKE_TORCH_CONTEXT``), created at the first trial (the helper's
``set_per_process_memory_fraction`` or the first allocation), as a real framework's is; new
memory comes in the stand-in allocator's segments.
"""

import json
import os
import random
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "standin"))
sys.path.append(os.path.join(HERE, "..", "..", "python"))

import torch  # noqa: E402

if os.environ.get("SIM_SILENT_FRAMEWORK") == "1":
    del sys.modules["torch"]  # the module keeps working; the helper never finds it by name

import sweepd_worker  # noqa: E402

MIB = 1 << 20


def size(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value * MIB)
    return torch._driver.parse_size(value)


def setting(params, name, env, default):
    return params[name] if name in params else (os.environ.get(env) or default)


def peak_of(params):
    """The trial's peak allocation as drawn, noise included (the context aside)."""
    product = [p.strip() for p in (os.environ.get("SIM_MEM_PRODUCT") or "").split(",")
               if p.strip()]
    if not product:
        peak = size(setting(params, "mem", "SIM_MEM", "1G"))
    else:
        mem = float(size(os.environ.get("SIM_MEM_UNIT") or "1M"))
        for entry in product:
            name, _, power = entry.partition("^")
            mem *= float(params[name]) ** float(power or 1)
        peak = size(os.environ.get("SIM_MEM_BASE") or 0) + int(mem)
    noise = float(os.environ.get("SIM_MEM_NOISE") or 0)
    if noise:
        peak = int(peak * (1 + noise * (2 * drawn(params, 1) - 1)))
    return peak


def drawn(params, which):
    """A number in [0, 1) that depends only on the params (and which draw it is)."""
    return random.Random("%s/%s" % (json.dumps(params, sort_keys=True), which)).random()


def hold_of(params):
    if "hold" in params:
        return float(params["hold"])
    span = os.environ.get("SIM_HOLD_RANGE")
    if span:
        low, high = (float(x) for x in span.split(","))
        return low + (high - low) * drawn(params, 2)
    return float(os.environ.get("SIM_HOLD_S") or 0.2)


def chunks(peak, steps):
    return [peak // steps + (peak % steps if step == steps - 1 else 0) for step in range(steps)]


def planned_usage(peak, steps):
    """What NVML would show at the trial's peak: the context and a segment per tensor (the
    stand-in allocator's sizes; the helper empties the cache between trials)."""
    alloc = torch._allocator
    context = torch._driver.parse_size(os.environ.get("FAKE_TORCH_CONTEXT") or "500M")
    return context + sum(alloc.allocation_size(alloc.round_size(n)) for n in chunks(peak, steps)
                         if n)


def value_of(params):
    return sum(float(v) ** 2 if isinstance(v, (int, float)) and not isinstance(v, bool)
               else len(str(v)) for v in params.values())


def record(number, began, outcome, planned, planned_s):
    path = os.environ.get("SIM_RECORD")
    if path:
        line = "%d %s %d %.6f %s %d %.6f\n" % (
            os.getpid(), number, torch._standin.usage_peak(), time.monotonic() - began, outcome,
            planned, planned_s)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())  # one write: workers append to one file
        finally:
            os.close(fd)


def objective(trial):
    params = trial.params
    peak, steps = peak_of(params), max(int(setting(params, "steps", "SIM_STEPS", 5)), 1)
    ramp, hold = float(setting(params, "ramp", "SIM_RAMP_S", 0.2)), hold_of(params)
    began = time.monotonic()
    torch._standin.ensure_context()
    torch._standin.reset_usage_peak()
    held, outcome = [], "fail"
    try:
        for step, nbytes in enumerate(chunks(peak, steps)):
            held.append(torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
            trial.report(value_of(params) + steps - 1 - step, step)
            time.sleep(ramp / steps)
        time.sleep(hold)
        outcome = "complete"
    finally:
        record(trial.number, began, outcome, planned_usage(peak, steps), ramp + hold)
    return value_of(params)


if __name__ == "__main__":
    sweepd_worker.serve(objective)
