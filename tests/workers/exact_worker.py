#!/usr/bin/env python3
"""A sweepd test worker that returns and reports floats that need every bit.

SWEEPD_TEST_VALUES=PATH  one IEEE-754 double per line, as 16 hex digits of its
                         bits; trial N reports values[N*21 + j] at steps
                         j = 0..19 and returns values[N*21 + 20] (modulo the
                         list's length)
SWEEPD_TEST_RECORD=PATH  append one JSON line per trial: {"number": N,
                         "params": {name: bits (hex) or the value itself}}

Run with --plain it is an argparse-style oneshot script that does not use the
sweepd_worker helper: it reads --name=value arguments and writes repr(value)
to SWEEPD_RESULT_FILE.
"""

import json
import os
import struct
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

STEPS = 20


def bits(f):
    return struct.pack(">d", f).hex()


def load_values():
    with open(os.environ["SWEEPD_TEST_VALUES"]) as f:
        return [struct.unpack(">d", bytes.fromhex(line.strip()))[0] for line in f if line.strip()]


def record(number, params):
    path = os.environ.get("SWEEPD_TEST_RECORD")
    if not path:
        return
    shown = {k: bits(v) if isinstance(v, float) else v for k, v in params.items()}
    line = json.dumps({"number": number, "params": shown}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def value_for(values, number, step):
    return values[(number * (STEPS + 1) + step) % len(values)]


def objective(trial):
    values = load_values()
    record(trial.number, trial.params)
    for step in range(STEPS):
        trial.report(value_for(values, trial.number, step), step)
    return value_for(values, trial.number, STEPS)


def plain():
    params = {}
    for arg in sys.argv[2:]:
        name, raw = arg[2:].split("=", 1)
        try:
            params[name] = int(raw)
        except ValueError:
            try:
                params[name] = float(raw)
            except ValueError:
                params[name] = raw
    number = int(os.environ["SWEEPD_TRIAL_NUMBER"])
    record(number, params)
    value = value_for(load_values(), number, STEPS)
    with open(os.environ["SWEEPD_RESULT_FILE"], "w") as f:
        f.write(repr(value))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--plain"]:
        plain()
    else:
        import sweepd_worker

        sweepd_worker.serve(objective)
