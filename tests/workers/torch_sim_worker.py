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
                         (SIM_MEM_UNIT default 1M, SIM_MEM_BASE default 0)
SIM_SILENT_FRAMEWORK=1   torch leaves ``sys.modules`` once imported: the helper neither caps it
                         nor reads its figures, as with a framework it does not know (only NVML
                         sees this worker's memory)
SIM_RECORD=PATH          appends "pid number peak_bytes outcome" per trial: the most the process
                         held (NVML's view) and complete or fail
"""

import os
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
    product = [p.strip() for p in (os.environ.get("SIM_MEM_PRODUCT") or "").split(",")
               if p.strip()]
    if not product:
        return size(setting(params, "mem", "SIM_MEM", "1G"))
    peak = float(size(os.environ.get("SIM_MEM_UNIT") or "1M"))
    for name in product:
        peak *= float(params[name])
    return size(os.environ.get("SIM_MEM_BASE") or 0) + int(peak)


def value_of(params):
    return sum(float(v) ** 2 if isinstance(v, (int, float)) and not isinstance(v, bool)
               else len(str(v)) for v in params.values())


def record(number, outcome):
    path = os.environ.get("SIM_RECORD")
    if path:
        with open(path, "a") as f:
            f.write("%d %s %d %s\n" % (os.getpid(), number, torch._standin.usage_peak(),
                                       outcome))


def objective(trial):
    params = trial.params
    peak, steps = peak_of(params), max(int(setting(params, "steps", "SIM_STEPS", 5)), 1)
    ramp = float(setting(params, "ramp", "SIM_RAMP_S", 0.2))
    torch._standin.ensure_context()
    torch._standin.reset_usage_peak()
    held, outcome = [], "fail"
    try:
        for step in range(steps):
            nbytes = peak // steps + (peak % steps if step == steps - 1 else 0)
            held.append(torch.empty(nbytes, dtype=torch.uint8, device="cuda"))
            trial.report(value_of(params) + steps - 1 - step, step)
            time.sleep(ramp / steps)
        time.sleep(float(setting(params, "hold", "SIM_HOLD_S", 0.2)))
        outcome = "complete"
    finally:
        record(trial.number, outcome)
    return value_of(params)


if __name__ == "__main__":
    sweepd_worker.serve(objective)
