#!/usr/bin/env python3
"""Dump every float of a study as Optuna reads it, as IEEE-754 bits.

usage: python tests/py/optuna_bits.py DB_PATH STUDY_NAME

One JSON object per trial, one per line, ordered by number:
{"number": 0, "state": "COMPLETE", "values": ["3fc9ae204a87fac3"] | null,
 "intermediate": {"0": "..."}, "params": {"x": "...", "opt": "adam"}}

Floats are 16 hex digits of their bits, so that nothing (JSON parsers
included) can round them on the way to the test.
"""

from __future__ import annotations

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import optuna  # noqa: E402

from _common import quiet, require_db, storage_url, usage  # noqa: E402


def bits(f: float) -> str:
    return struct.pack(">d", f).hex()


def shown(v):
    return bits(v) if isinstance(v, float) else v


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        usage("usage: optuna_bits.py DB_PATH STUDY_NAME")
    require_db(argv[1])
    quiet()
    study = optuna.load_study(study_name=argv[2], storage=storage_url(argv[1]))
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        doc = {
            "number": t.number,
            "state": t.state.name,
            "values": None if t.values is None else [bits(v) for v in t.values],
            "intermediate": {str(s): bits(v) for s, v in t.intermediate_values.items()},
            "params": {k: shown(v) for k, v in t.params.items()},
        }
        print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
